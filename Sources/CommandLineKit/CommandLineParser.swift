/// Matches a command line against a `CommandSpec` tree, producing a `ParseResult` or a
/// `UsageError`. It never prints and never exits; that is `main`'s job.
///
/// Rules:
/// - the first plain word names a subcommand while the current command has subcommands;
/// - options of the command and of every command above it are accepted, so the root's
///   (global) options may come before or after the subcommand name;
/// - a value option takes its value attached (`--address=ADDR`, `-aADDR`) or from the next
///   word, which may be a negative number but not another option;
/// - `--` ends options: every later word is a positional;
/// - `--help`/`-h` anywhere before `--` wins over every other problem on the line.
public struct CommandLineParser: Sendable {
    /// The root of the command tree; its options are global.
    public let root: CommandSpec

    /// Creates a parser for the tree under `root`.
    public init(root: CommandSpec) {
        self.root = root
    }

    /// Parses `arguments`, which exclude the program name: pass `CommandLine.arguments.dropFirst()`.
    public func parse<Arguments: Sequence>(_ arguments: Arguments) throws(UsageError) -> ParseResult
    where Arguments.Element == String {
        let tokens = ArgumentLexer.tokenize(arguments)
        do throws(UsageError) {
            var state = State(root: root)
            return try state.consume(tokens)
        } catch {
            // `propctl set --bogus --help` should explain `set`, not complain about `--bogus`.
            if asksForHelp(tokens) { return .help(error.commandPath) }
            throw error
        }
    }

    private func asksForHelp(_ tokens: [ArgumentToken]) -> Bool {
        guard let help = root.options.first(where: { $0.long == OptionSpec.help.long }) else { return false }
        for token in tokens {
            switch token {
            case .terminator:
                return false
            case .longOption(let name, _) where name == help.long:
                return true
            case .shortOptions(let letters) where help.short.map(letters.contains) ?? false:
                return true
            default:
                continue
            }
        }
        return false
    }
}

extension CommandLineParser {
    /// The progress of one parse: where in the command tree we are and what has been collected.
    private struct State {
        let root: CommandSpec
        var path: [String] = []
        var command: CommandSpec
        /// The current command and its ancestors, innermost first: where options are looked up.
        var scopes: [CommandSpec]
        var optionValues: [String: [String]] = [:]
        var flags: Set<String> = []
        var words: [String] = []
        var afterTerminator = false

        init(root: CommandSpec) {
            self.root = root
            self.command = root
            self.scopes = [root]
        }

        mutating func consume(_ tokens: [ArgumentToken]) throws(UsageError) -> ParseResult {
            var index = 0
            // Returns the next token if it can serve as an option's value, advancing past it.
            func nextValue() -> String? {
                guard index < tokens.count, case .value(let word) = tokens[index] else { return nil }
                index += 1
                return word
            }
            while index < tokens.count {
                let token = tokens[index]
                index += 1
                switch token {
                case .terminator:
                    afterTerminator = true
                case .longOption(let name, let attached):
                    guard let option = option(long: name) else {
                        throw .unknownOption("--\(name)", suggestion: suggestion(forLong: name), at: path)
                    }
                    if option.takesValue {
                        guard let value = attached ?? nextValue() else { throw .missingValue(for: option, at: path) }
                        try record(option, value: value)
                    } else {
                        guard attached == nil else { throw .unexpectedValue(for: option, at: path) }
                        flags.insert(option.long)
                    }
                case .shortOptions(let letters):
                    var rest = Substring(letters)
                    while let letter = rest.popFirst() {
                        guard let option = option(short: letter) else {
                            throw .unknownOption("-\(letter)", suggestion: nil, at: path)
                        }
                        guard option.takesValue else {
                            flags.insert(option.long)
                            continue
                        }
                        // The rest of the cluster is the value: `-aADDR`.
                        guard let value = rest.isEmpty ? nextValue() : String(rest) else {
                            throw .missingValue(for: option, at: path)
                        }
                        try record(option, value: value)
                        rest = ""
                    }
                case .value(let word):
                    try take(word)
                }
            }
            return try finish()
        }

        private mutating func take(_ word: String) throws(UsageError) {
            guard !afterTerminator, words.isEmpty, !command.subcommands.isEmpty else {
                words.append(word)
                return
            }
            if let subcommand = command.subcommand(named: word) {
                path.append(word)
                command = subcommand
                scopes.insert(subcommand, at: 0)
            } else if command.positionals.isEmpty {
                let names = command.subcommands.map(\.name)
                throw .unknownSubcommand(word, suggestion: command.familiarWords[word] ?? closest(to: word, among: names), at: path)
            } else {
                words.append(word)
            }
        }

        private mutating func record(_ option: OptionSpec, value: String) throws(UsageError) {
            if !option.isRepeatable && optionValues[option.long] != nil {
                throw .repeatedOption(option, at: path)
            }
            optionValues[option.long, default: []].append(value)
        }

        private func finish() throws(UsageError) -> ParseResult {
            if flags.contains(OptionSpec.help.long) { return .help(path) }
            if flags.contains(OptionSpec.version.long) { return .version }
            if !command.subcommands.isEmpty && command.positionals.isEmpty {
                throw .missingSubcommand(at: path)
            }
            for scope in scopes {
                for group in scope.exclusiveOptions {
                    // As the group's own command declares each option: a subcommand's value
                    // option of the same name (history --user USER) is not the global flag.
                    let given = group.filter { name in
                        guard let declared = scope.options.first(where: { $0.long == name }) else { return flags.contains(name) || optionValues[name] != nil }
                        return declared.takesValue ? optionValues[name] != nil : flags.contains(name)
                    }
                    if given.count > 1 { throw .conflictingOptions(given, at: path) }
                }
            }
            let optionNames = scopes.flatMap { $0.options.map(\.long) }
            return .command(ParsedCommand(
                path: path,
                optionValues: optionValues,
                flags: flags,
                positionalValues: try assignWords(),
                declaredNames: Set(optionNames + command.positionals.map(\.name))
            ))
        }

        /// Gives each required positional one word, then hands the surplus out in declaration
        /// order: one to each optional positional, all the rest to a repeating one.
        private func assignWords() throws(UsageError) -> [String: [String]] {
            let positionals = command.positionals
            let required = positionals.filter { !$0.isOptional }
            if words.count < required.count {
                throw .missingArgument(required[words.count], at: path)
            }
            var surplus = words.count - required.count
            var remaining = words[...]
            var assigned: [String: [String]] = [:]
            for positional in positionals {
                var count = positional.isOptional ? 0 : 1
                let extra = positional.isRepeating ? surplus : min(surplus, positional.isOptional ? 1 : 0)
                count += extra
                surplus -= extra
                assigned[positional.name] = Array(remaining.prefix(count))
                remaining = remaining.dropFirst(count)
            }
            if let leftover = remaining.first {
                throw .unexpectedArgument(leftover, at: path)
            }
            return assigned
        }

        private func option(long: String) -> OptionSpec? {
            for scope in scopes {
                if let option = scope.options.first(where: { $0.long == long }) { return option }
            }
            return nil
        }

        private func option(short: Character) -> OptionSpec? {
            for scope in scopes {
                if let option = scope.options.first(where: { $0.short == short }) { return option }
            }
            return nil
        }

        private func suggestion(forLong name: String) -> String? {
            let names = scopes.flatMap { $0.options.map(\.long) }
            return closest(to: name, among: names).map { "--\($0)" }
        }
    }
}
