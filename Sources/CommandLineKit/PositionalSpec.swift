/// One positional argument of a command, such as `KEY` in `propctl set KEY VALUE`.
///
/// Positionals are matched in declaration order. At most one of them should repeat, and it
/// should come last, so that the assignment of words to positionals is never ambiguous.
public struct PositionalSpec: Hashable, Sendable {
    /// The name used to look the value up in a `ParsedCommand`, e.g. `KEY`.
    public var name: String
    /// The name shown in usage and help; usually the same as `name`, e.g. `KEY|PREFIX`.
    public var displayName: String
    /// One-line description shown in help.
    public var help: String
    /// Whether the command runs without it.
    public var isOptional: Bool
    /// Whether it collects every remaining word.
    public var isRepeating: Bool
    /// What shells complete for it.
    public var completion: CompletionHint

    /// Creates a positional. `display` overrides the name shown in help; `completion` says what
    /// shells offer for it.
    public init(_ name: String, display: String? = nil, help: String, optional: Bool = false, repeating: Bool = false,
                completion: CompletionHint = .none) {
        self.name = name
        self.displayName = display ?? name
        self.help = help
        self.isOptional = optional
        self.isRepeating = repeating
        self.completion = completion
    }

    /// The positional as it appears in a usage line: `KEY`, `[PREFIX]`, `KEY...`, `[KEY...]`.
    public var usage: String {
        let base = isRepeating ? "\(displayName)..." : displayName
        return isOptional ? "[\(base)]" : base
    }
}
