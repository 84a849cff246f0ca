/// The declaration of a command: what it is called, what it accepts and how it is explained.
///
/// Both `CommandLineParser` and `HelpGenerator` read this one value, so the help text cannot
/// disagree with what the parser accepts. The root command's options are global: every
/// subcommand accepts them, before or after its own name.
public struct CommandSpec: Hashable, Sendable {
    /// A worked example shown at the end of the help.
    public struct Example: Hashable, Sendable {
        /// What the example does, shown as a shell comment above it.
        public var summary: String
        /// The complete command line, starting with the program name.
        public var commandLine: String

        /// Creates an example.
        public init(_ summary: String, _ commandLine: String) {
            self.summary = summary
            self.commandLine = commandLine
        }
    }

    /// One item of a list of the manual page (EXIT STATUS, ENVIRONMENT, FILES): a term, e.g.
    /// `64` or `DBUS_SESSION_BUS_ADDRESS`, and what it means.
    public struct Entry: Hashable, Sendable {
        /// The exit status, variable or path.
        public var term: String
        /// What it means, one sentence or a few.
        public var text: String

        /// Creates an entry.
        public init(_ term: String, _ text: String) {
            self.term = term
            self.text = text
        }
    }

    /// The word that selects the command, e.g. `set`; the program name for the root.
    public var name: String
    /// One sentence saying what the command does.
    public var abstract: String
    /// Longer explanation, shown below the usage line. Lines are kept; long ones are wrapped.
    public var discussion: String?
    /// The command's own options.
    public var options: [OptionSpec]
    /// The command's positional arguments, in order.
    public var positionals: [PositionalSpec]
    /// The commands one level below this one.
    public var subcommands: [CommandSpec]
    /// Sets of option long names of which at most one may be given, e.g. the bus selectors.
    public var exclusiveOptions: [[String]]
    /// Examples shown at the end of the help.
    public var examples: [Example]
    /// Words users bring from other tools (`ls`, `monitor`) and what to type here instead: an
    /// unknown subcommand that is one of them is answered with it rather than a near spelling.
    public var familiarWords: [String: String]
    /// The exit statuses and what each means: `--help` shows them after the discussion, the
    /// manual page as EXIT STATUS.
    public var exitStatuses: [Entry]
    /// The environment variables the program reads (the manual page's ENVIRONMENT).
    public var environment: [Entry]
    /// The files the program reads or installs (the manual page's FILES).
    public var files: [Entry]

    /// Creates a command declaration.
    public init(
        name: String,
        abstract: String,
        discussion: String? = nil,
        options: [OptionSpec] = [],
        positionals: [PositionalSpec] = [],
        subcommands: [CommandSpec] = [],
        exclusiveOptions: [[String]] = [],
        examples: [Example] = [],
        familiarWords: [String: String] = [:],
        exitStatuses: [Entry] = [],
        environment: [Entry] = [],
        files: [Entry] = []
    ) {
        self.name = name
        self.abstract = abstract
        self.discussion = discussion
        self.options = options
        self.positionals = positionals
        self.subcommands = subcommands
        self.exclusiveOptions = exclusiveOptions
        self.examples = examples
        self.familiarWords = familiarWords
        self.exitStatuses = exitStatuses
        self.environment = environment
        self.files = files
    }

    /// The direct subcommand called `name`, if any.
    public func subcommand(named name: String) -> CommandSpec? {
        subcommands.first { $0.name == name }
    }

    /// The command reached by following `path` from this one; `[]` is this command itself.
    public func command(at path: [String]) -> CommandSpec? {
        var command = self
        for name in path {
            guard let next = command.subcommand(named: name) else { return nil }
            command = next
        }
        return command
    }

    /// The command itself and every command above it on `path`, innermost first: the options
    /// in scope there, in lookup order.
    public func scopes(along path: [String]) -> [CommandSpec] {
        var chain = [self]
        for name in path {
            guard let next = chain[chain.count - 1].subcommand(named: name) else { break }
            chain.append(next)
        }
        return chain.reversed()
    }
}
