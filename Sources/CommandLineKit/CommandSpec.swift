/// The declaration of a command: what it is called, what it accepts and how it is explained.
///
/// Both `CommandLineParser` and `HelpGenerator` read this one value, so the help text cannot
/// disagree with what the parser accepts. The root command's options are global: every
/// subcommand accepts them, before or after its own name.
struct CommandSpec: Hashable, Sendable {
    /// A worked example shown at the end of the help.
    struct Example: Hashable, Sendable {
        /// What the example does, shown as a shell comment above it.
        var summary: String
        /// The complete command line, starting with the program name.
        var commandLine: String

        /// Creates an example.
        init(_ summary: String, _ commandLine: String) {
            self.summary = summary
            self.commandLine = commandLine
        }
    }

    /// The word that selects the command, e.g. `set`; the program name for the root.
    var name: String
    /// One sentence saying what the command does.
    var abstract: String
    /// Longer explanation, shown below the usage line. Lines are kept; long ones are wrapped.
    var discussion: String?
    /// The command's own options.
    var options: [OptionSpec]
    /// The command's positional arguments, in order.
    var positionals: [PositionalSpec]
    /// The commands one level below this one.
    var subcommands: [CommandSpec]
    /// Sets of option long names of which at most one may be given, e.g. the bus selectors.
    var exclusiveOptions: [[String]]
    /// Examples shown at the end of the help.
    var examples: [Example]

    /// Creates a command declaration.
    init(
        name: String,
        abstract: String,
        discussion: String? = nil,
        options: [OptionSpec] = [],
        positionals: [PositionalSpec] = [],
        subcommands: [CommandSpec] = [],
        exclusiveOptions: [[String]] = [],
        examples: [Example] = []
    ) {
        self.name = name
        self.abstract = abstract
        self.discussion = discussion
        self.options = options
        self.positionals = positionals
        self.subcommands = subcommands
        self.exclusiveOptions = exclusiveOptions
        self.examples = examples
    }

    /// The direct subcommand called `name`, if any.
    func subcommand(named name: String) -> CommandSpec? {
        subcommands.first { $0.name == name }
    }

    /// The command reached by following `path` from this one; `[]` is this command itself.
    func command(at path: [String]) -> CommandSpec? {
        var command = self
        for name in path {
            guard let next = command.subcommand(named: name) else { return nil }
            command = next
        }
        return command
    }

    /// The command itself and every command above it on `path`, innermost first: the options
    /// in scope there, in lookup order.
    func scopes(along path: [String]) -> [CommandSpec] {
        var chain = [self]
        for name in path {
            guard let next = chain[chain.count - 1].subcommand(named: name) else { break }
            chain.append(next)
        }
        return chain.reversed()
    }
}
