/// One option of a command: a flag such as `--json`, or an option that takes a value such as
/// `--address ADDR`.
///
/// Options are looked up in a `ParsedCommand` by their long name, without the dashes.
public struct OptionSpec: Hashable, Sendable {
    /// Whether the option stands alone or takes a value.
    public enum Kind: Hashable, Sendable {
        /// A boolean switch: present or absent.
        case flag
        /// An option followed by a value; the associated name is shown in help, e.g. `ADDR`.
        case value(name: String)
    }

    /// The long name, without the leading `--`, e.g. `address`.
    public var long: String
    /// The optional one-letter name, without the leading `-`, e.g. `h`.
    public var short: Character?
    /// Flag or value option.
    public var kind: Kind
    /// One-line description shown in help.
    public var help: String
    /// Whether the option may be given more than once, collecting every value.
    public var isRepeatable: Bool
    /// What shells complete for the value.
    public var completion: CompletionHint

    /// Creates an option. Short names must not be digits, so that `-5` always reads as a number.
    public init(long: String, short: Character? = nil, kind: Kind, help: String, isRepeatable: Bool = false,
                completion: CompletionHint = .none) {
        precondition(!long.isEmpty && !long.hasPrefix("-"), "give the long name without dashes: \(long)")
        precondition(short.map { !$0.isNumber && $0 != "-" } ?? true, "a short option cannot be a digit or '-'")
        self.long = long
        self.short = short
        self.kind = kind
        self.help = help
        self.isRepeatable = isRepeatable
        self.completion = completion
    }

    /// A flag such as `--json`.
    public static func flag(_ long: String, short: Character? = nil, help: String) -> OptionSpec {
        OptionSpec(long: long, short: short, kind: .flag, help: help)
    }

    /// An option taking a value such as `--address ADDR`; `repeatable` collects every occurrence,
    /// `completion` says what shells offer for the value.
    public static func value(
        _ long: String, short: Character? = nil, valueName: String, help: String, repeatable: Bool = false,
        completion: CompletionHint = .none
    ) -> OptionSpec {
        OptionSpec(long: long, short: short, kind: .value(name: valueName), help: help, isRepeatable: repeatable,
                   completion: completion)
    }

    /// The standard `-h, --help` flag. The parser answers it with `ParseResult.help` wherever it
    /// appears, so it is declared once, on the root, and inherited by every subcommand.
    public static let help = OptionSpec.flag("help", short: "h", help: "Show this help and exit.")

    /// The standard `--version` flag, answered with `ParseResult.version`.
    public static let version = OptionSpec.flag("version", help: "Print the version and exit.")

    /// Whether the option consumes a value.
    public var takesValue: Bool {
        if case .value = kind { return true }
        return false
    }

    /// The value placeholder shown in help, e.g. `ADDR`; `nil` for a flag.
    public var valueName: String? {
        if case .value(let name) = kind { return name }
        return nil
    }

    /// The option as a user types it, e.g. `--address`.
    public var longFlag: String { "--\(long)" }
}
