import DBusValues

/// A command's fixed description (docs/commands.md): what runs, when it is enabled, and how.
public struct CommandDefinition: Hashable, Sendable {
    /// What an execution does.
    public enum Work: Hashable, Sendable {
        /// An argv, spawned directly: the input never reaches a shell.
        case exec([String])
        /// Forwarded to the client registered with `Manager.RegisterHandler`.
        case handler
    }

    public var key: Key
    public var work: Work
    /// When the command may run, over keys; `nil`: always.
    public var enabledWhen: Expression?
    /// Whether executions may overlap (`concurrent`, default false).
    public var concurrent = false
    /// Seconds before an execution is stopped with `TimedOut`; `nil`: never.
    public var timeout: Double?
    /// Whether the definition survives restarts (`persistent`, default true, like properties).
    public var persistent = true
    public var description = ""
    /// Who may execute it (docs/security.md), as for properties.
    public var writers: [String]?
    /// The uid that created it: charged with it (``Quota/commands``), and the principal whose
    /// rights its `enabled_when` reads with; `nil`: the daemon's own (a model file) or created
    /// without access control. Not a `CreateCommand` option: the store keeps it in
    /// ``storedOptions``.
    public var creator: UInt32?

    /// The option names `CreateCommand` accepts.
    public static let optionNames = ["exec", "handler", "enabled_when", "concurrent", "timeout", "persistent", "description", "writers"]

    /// The three state keys every command exposes as read-only properties of its own group.
    public static let stateNames = ["Enabled", "Executing", "Executions"]

    /// The longest command key: its state keys (`KEY.Executions` the longest) are keys too,
    /// and must be valid ones.
    public static let maximumKeyLength = Key.maximumLength - 1 - stateNames.map(\.utf8.count).max()!

    /// Refuses a command key whose state keys would be longer than a key may be, with
    /// `InvalidKey` naming the key, the state key and both limits.
    public static func checkKey(_ key: Key) throws(PropBusError) {
        let length = key.text.utf8.count
        guard length > maximumKeyLength else { return }
        let longest = stateNames.max { $0.utf8.count < $1.utf8.count }!
        throw PropBusError(.invalidKey, "invalid command key '\(key)': it is \(length) bytes long, so its state key \(key).\(longest) would be \(length + 1 + longest.utf8.count) bytes, more than the \(Key.maximumLength) a key may have; a command key has at most \(maximumKeyLength) bytes")
    }

    /// Reads `CreateCommand` options; errors name the command and the option.
    public init(key: Key, options: [String: DBusValue]) throws(PropBusError) {
        try Self.checkKey(key)
        self.key = key
        var argv: [String]?
        var handler = false
        for (name, raw) in options.sorted(by: { $0.key < $1.key }) {
            let value = raw.unwrappingVariant
            func expect(_ what: String) -> PropBusError {
                .invalidArgs("option '\(name)' of command \(key) must be \(what), got '\(value.signature)'")
            }
            // An exec argument would be cut short there, a writers name match another user.
            guard !value.holdsNULInAString else {
                throw .invalidArgs("option '\(name)' of command \(key) holds a NUL character (U+0000), which D-Bus strings cannot carry")
            }
            switch name {
            case "exec":
                guard case .array(.string, let items) = value else { throw expect("an argv (as)") }
                let words = items.compactMap(\.stringValue)
                guard let program = words.first, !program.isEmpty else {
                    throw .invalidArgs("option 'exec' of command \(key) must name a program: the argv is empty")
                }
                argv = words
            case "handler":
                guard let flag = value.boolValue else { throw expect("a boolean (b)") }
                handler = flag
            case "enabled_when":
                guard let text = value.stringValue, case .string = value else { throw expect("an expression string (s)") }
                do { enabledWhen = try Expression(parsing: text) } catch {
                    throw PropBusError(error.code, "option 'enabled_when' of command \(key): \(error.message)")
                }
            case "concurrent":
                guard let flag = value.boolValue else { throw expect("a boolean (b)") }
                concurrent = flag
            case "persistent":
                guard let flag = value.boolValue else { throw expect("a boolean (b)") }
                persistent = flag
            case "timeout":
                guard let seconds = value.numericValue else { throw expect("a number of seconds (d)") }
                guard seconds > 0, seconds.isFinite, seconds <= 86_400 * 365 else {
                    throw .invalidArgs("option 'timeout' of command \(key) must be a positive number of seconds, got \(seconds)")
                }
                timeout = seconds
            case "description":
                guard case .string(let text) = value else { throw expect("a string (s)") }
                description = text
            case "writers":
                guard case .array(.string, let items) = value else { throw expect("a list of user or @group names (as)") }
                writers = items.compactMap(\.stringValue)
            default:
                throw .invalidArgs("unknown option '\(name)' for CreateCommand \(key); expected one of: \(Self.optionNames.joined(separator: ", "))")
            }
        }
        switch (argv, handler) {
        case (let argv?, false): work = .exec(argv)
        case (nil, true): work = .handler
        case (nil, false):
            throw .invalidArgs("command \(key) needs either option 'exec' (an argv) or 'handler' = true")
        case (.some, true):
            throw .invalidArgs("command \(key) cannot have both 'exec' and 'handler' = true")
        }
    }

    /// The options that recreate this definition, e.g. for the store and `ListCommands`.
    public var options: [String: DBusValue] {
        var result: [String: DBusValue] = [
            "concurrent": .boolean(concurrent), "persistent": .boolean(persistent), "description": .string(description),
        ]
        switch work {
        case .exec(let argv): result["exec"] = .array(of: .string, argv.map { .string($0) })
        case .handler: result["handler"] = .boolean(true)
        }
        if let enabledWhen { result["enabled_when"] = .string(enabledWhen.text) }
        if let timeout { result["timeout"] = .double(timeout) }
        if let writers { result["writers"] = .array(of: .string, writers.map { .string($0) }) }
        return result
    }

    /// The option under which the store keeps ``creator`` (no caller may pass it).
    static let creatorOption = "creator"

    /// ``options`` with the ``creator``, as the store keeps them.
    public var storedOptions: [String: DBusValue] {
        var result = options
        if let creator { result[Self.creatorOption] = .uint32(creator) }
        return result
    }

    /// Stored options without the creator, and the creator.
    static func splittingCreator(_ stored: [String: DBusValue]) -> (options: [String: DBusValue], creator: UInt32?) {
        var options = stored
        guard let value = options.removeValue(forKey: creatorOption) else { return (options, nil) }
        if case .uint32(let uid) = value.unwrappingVariant { return (options, uid) }
        return (options, nil)
    }

    /// Whether an execution needs a registered handler.
    public var needsHandler: Bool { work == .handler }
}
