/// A command line that does not match the specification. `main` prints it with
/// `HelpGenerator.errorText(for:)` and exits with status 64 (`EX_USAGE`).
public struct UsageError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What is wrong, naming the offending word, e.g. `unknown option '--jsn'; did you mean '--json'?`.
    public var message: String
    /// The subcommand path reached before the error, e.g. `["set"]`, so the caller can point
    /// at the right help.
    public var commandPath: [String]

    /// Creates an error.
    public init(_ message: String, commandPath: [String]) {
        self.message = message
        self.commandPath = commandPath
    }

    /// The message alone, as `main` prints it after the program name.
    public var description: String { message }
}

extension UsageError {
    /// An option that no command in scope declares.
    public static func unknownOption(_ spelling: String, suggestion: String?, at path: [String]) -> UsageError {
        UsageError("unknown option '\(spelling)'" + hint(suggestion), commandPath: path)
    }

    /// A word where a subcommand name was expected.
    public static func unknownSubcommand(_ word: String, suggestion: String?, at path: [String]) -> UsageError {
        UsageError("unknown subcommand '\(word)'" + hint(suggestion), commandPath: path)
    }

    /// A command that only groups subcommands, given none.
    public static func missingSubcommand(at path: [String]) -> UsageError {
        UsageError("missing subcommand", commandPath: path)
    }

    /// A value option at the end of the line, or followed by another option.
    public static func missingValue(for option: OptionSpec, at path: [String]) -> UsageError {
        UsageError("option '\(option.longFlag)' needs a value \(option.valueName ?? "")", commandPath: path)
    }

    /// A flag given a value with `--flag=value`.
    public static func unexpectedValue(for option: OptionSpec, at path: [String]) -> UsageError {
        UsageError("option '\(option.longFlag)' takes no value", commandPath: path)
    }

    /// A non-repeatable option given twice.
    public static func repeatedOption(_ option: OptionSpec, at path: [String]) -> UsageError {
        UsageError("option '\(option.longFlag)' given more than once", commandPath: path)
    }

    /// Two options of one exclusive set.
    public static func conflictingOptions(_ longNames: [String], at path: [String]) -> UsageError {
        let spellings = longNames.map { "'--\($0)'" }.joined(separator: " and ")
        return UsageError("options \(spellings) cannot be used together", commandPath: path)
    }

    /// A required positional with no word left for it.
    public static func missingArgument(_ positional: PositionalSpec, at path: [String]) -> UsageError {
        UsageError("missing argument \(positional.displayName)", commandPath: path)
    }

    /// A word left over once every positional has its share.
    public static func unexpectedArgument(_ word: String, at path: [String]) -> UsageError {
        UsageError("unexpected argument '\(word)'", commandPath: path)
    }

    private static func hint(_ suggestion: String?) -> String {
        suggestion.map { "; did you mean '\($0)'?" } ?? ""
    }
}
