/// What a command line asks for, as decided by `CommandLineParser`.
public enum ParseResult: Hashable, Sendable {
    /// Run the command described.
    case command(ParsedCommand)
    /// Print the help of the command at this path (`[]` for the root) and exit 0. Given
    /// whenever `--help` or `-h` appears before any `--`, even next to otherwise bad arguments.
    case help([String])
    /// Print the version and exit 0.
    case version
}
