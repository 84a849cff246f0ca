/// A command line that matched the specification: which command to run and with what.
///
/// Values are looked up by the names used in the spec: an option's long name without dashes
/// (`"address"`), a positional's name (`"KEY"`). Asking for a name the command does not declare
/// is a programming error, caught by an assertion in debug builds.
public struct ParsedCommand: Hashable, Sendable {
    /// The subcommand names from the root down, e.g. `["set"]`.
    public var path: [String]
    /// Every value given for each value option, in command-line order, keyed by long name.
    public var optionValues: [String: [String]]
    /// The long names of the flags given.
    public var flags: Set<String>
    /// The words assigned to each positional, keyed by positional name.
    public var positionalValues: [String: [String]]
    /// Every option and positional name valid for this command; guards lookups against typos.
    public var declaredNames: Set<String>

    /// Creates a parsed command. `declaredNames` empty disables the lookup check.
    public init(
        path: [String],
        optionValues: [String: [String]] = [:],
        flags: Set<String> = [],
        positionalValues: [String: [String]] = [:],
        declaredNames: Set<String> = []
    ) {
        self.path = path
        self.optionValues = optionValues
        self.flags = flags
        self.positionalValues = positionalValues
        self.declaredNames = declaredNames
    }

    /// The subcommand to run, e.g. `"set"`; `nil` for the root itself.
    public var subcommand: String? { path.first }

    /// The value of a value option, e.g. `option("address")`; the last one if it was repeated.
    public func option(_ long: String) -> String? {
        checkDeclared(long)
        return optionValues[long]?.last
    }

    /// Every value of a repeatable option, in order, e.g. `options("choice")`.
    public func options(_ long: String) -> [String] {
        checkDeclared(long)
        return optionValues[long] ?? []
    }

    /// Whether a flag was given, e.g. `flag("json")`.
    public func flag(_ long: String) -> Bool {
        checkDeclared(long)
        return flags.contains(long)
    }

    /// The word given for a positional, e.g. `positional("KEY")`; the first if it repeats.
    public func positional(_ name: String) -> String? {
        checkDeclared(name)
        return positionalValues[name]?.first
    }

    /// Every word given for a repeating positional, e.g. `positionals("KEY")` for `get`.
    public func positionals(_ name: String) -> [String] {
        checkDeclared(name)
        return positionalValues[name] ?? []
    }

    private func checkDeclared(_ name: String) {
        assert(declaredNames.isEmpty || declaredNames.contains(name),
               "'\(name)' is not declared for '\(path.joined(separator: " "))'")
    }
}
