import DBusValues

/// How a binding's values flow: the options of `Bind`, typed.
///
/// The one reading of a binding's `a{sv}`: the daemon's `Bind`, a model file's `bindings`
/// entries, `propctl bind --to` and the persistent bindings the store gives back all go
/// through ``init(options:binding:)``, so they accept and refuse the same things.
public struct BindOptions: Sendable, Hashable {
    /// Which way values flow (`direction`).
    public var direction: Binding.Direction
    /// Maps a value of `to` into `key`'s domain (`to_key`); identity when `nil`.
    public var toKey: Expression?
    /// Maps a value of `key` into `to`'s domain (`to_target`); identity when `nil`.
    public var toTarget: Expression?
    /// Whether the binding is stored and survives restarts (`persistent`).
    public var persistent: Bool

    /// The option names `Bind` accepts.
    public static let names = ["direction", "to_key", "to_target", "persistent"]

    /// Options from their parts; the defaults are `Bind`'s with an empty dictionary.
    public init(direction: Binding.Direction = .both, toKey: Expression? = nil, toTarget: Expression? = nil,
                persistent: Bool = false) {
        self.direction = direction
        self.toKey = toKey
        self.toTarget = toTarget
        self.persistent = persistent
    }

    /// Reads `Bind`'s options (each may come wrapped in a variant).
    ///
    /// - Parameter binding: what the messages call the binding ("the binding a.x ↔ b.y").
    /// - Throws: `InvalidArgs` for an unknown name or a value of the wrong type, naming the
    ///   option and what it takes; `InvalidExpression` for a transform that does not parse.
    public init(options: [String: DBusValue], binding: String = "a binding") throws(PropBusError) {
        self.init()
        // Sorted, so that of several bad options the same one is named every time.
        for (name, raw) in options.sorted(by: { $0.key < $1.key }) {
            let value = raw.unwrappingVariant
            switch name {
            case "direction":
                guard let text = value.stringValue, let direction = Binding.Direction(rawValue: text) else {
                    throw .invalidArgs("option 'direction' of \(binding) must be one of both, from, to; got \(ValueDescription.short(value))")
                }
                self.direction = direction
            case "to_key", "to_target":
                guard case .string(let text) = value else {
                    throw .invalidArgs("option '\(name)' of \(binding) must be an expression string (s), got '\(value.signature)'")
                }
                let expression: Expression
                do { expression = try Expression(parsing: text) } catch {
                    throw PropBusError(error.code, "option '\(name)' of \(binding): \(error.message)")
                }
                if name == "to_key" { toKey = expression } else { toTarget = expression }
            case "persistent":
                guard let flag = value.boolValue else {
                    throw .invalidArgs("option 'persistent' of \(binding) must be a boolean (b), got '\(value.signature)'")
                }
                persistent = flag
            default:
                throw .invalidArgs("unknown option '\(name)' for Bind; expected one of: \(Self.names.joined(separator: ", "))")
            }
        }
    }

    /// The options as `Bind` takes them: what ``init(options:binding:)`` reads back to these.
    public var dictionary: [String: DBusValue] {
        var result: [String: DBusValue] = ["direction": .string(direction.rawValue), "persistent": .boolean(persistent)]
        if let toKey { result["to_key"] = .string(toKey.text) }
        if let toTarget { result["to_target"] = .string(toTarget.text) }
        return result
    }
}

extension Binding {
    /// A binding of `key` to `to` made with `options`.
    public init(id: UInt64, key: Key, to: Key, options: BindOptions, owner: String? = nil, principal: UInt32? = nil) {
        self.init(id: id, key: key, to: to, direction: options.direction, toKey: options.toKey, toTarget: options.toTarget,
                  persistent: options.persistent, owner: owner, principal: principal)
    }

    /// The options that make this binding again.
    public var bindOptions: BindOptions {
        BindOptions(direction: direction, toKey: toKey, toTarget: toTarget, persistent: persistent)
    }
}
