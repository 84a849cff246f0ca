/// One lexical unit of a command line, as split by `ArgumentLexer`.
///
/// Tokens carry no knowledge of any command: whether `--address` takes a value, or whether a
/// word names a subcommand, is decided later by `CommandLineParser`.
public enum ArgumentToken: Hashable, Sendable {
    /// `--name`, or `--name=value` with the value attached.
    case longOption(String, value: String?)
    /// `-abc`: one or more short option letters, without the dash. The parser decides where a
    /// value option's attached value (`-avalue`) begins.
    case shortOptions(String)
    /// A plain word: a subcommand name, a positional, or an option's value. `-` alone, negative
    /// numbers such as `-5`, and every word after `--` are values too.
    case value(String)
    /// `--`: everything after it is a value.
    case terminator
}
