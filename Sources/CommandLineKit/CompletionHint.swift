/// What a shell completion offers for an option's value or a positional. The completion
/// scripts are generated from the specs, so a hint declared here is completed in every shell.
public enum CompletionHint: Hashable, Sendable {
    /// Nothing: a free value (a number, a text, a new name).
    case none
    /// A path of the file system.
    case file
    /// One of these words.
    case choices([String])
    /// Words the program finds at completion time; the name says which (e.g. `key`), and the
    /// script generator knows how to ask for them.
    case dynamic(String)
}
