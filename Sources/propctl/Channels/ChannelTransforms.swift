import DBus
import PropBus

/// Which way a client channel propagates: `from` the bus key to the local side, `to` the bus
/// key from the local side, or `both`.
enum ChannelDirection: String, Sendable, CaseIterable {
    case both, from, to

    /// Whether bus changes reach the local side.
    var towardsLocal: Bool { self != .to }
    /// Whether local changes reach the bus.
    var towardsBus: Bool { self != .from }

    /// Reads `--direction`; a usage error for anything else.
    init(option text: String?) throws(CommandFailure) {
        guard let text else {
            self = .both
            return
        }
        guard let direction = ChannelDirection(rawValue: text) else {
            throw CommandFailure(.usage, "--direction must be both, from or to, not '\(text)'")
        }
        self = direction
    }
}

/// The `--map` and `--unmap` expressions of a client channel, and the text conventions around
/// them: local values are text, bus values have the key's type.
struct ChannelTransforms: Sendable {
    /// Bus value → local text (`value` is the bus value).
    var map: Expression?
    /// Local text → bus value (`value` is the local text, a string).
    var unmap: Expression?

    /// Parses both options; a malformed expression is a usage error naming the option.
    init(map: String?, unmap: String?) throws(CommandFailure) {
        func parse(_ text: String?, _ option: String) throws(CommandFailure) -> Expression? {
            guard let text else { return nil }
            do { return try Expression(parsing: text) } catch {
                throw CommandFailure(.usage, "invalid --\(option) expression: \(error.message)")
            }
        }
        self.map = try parse(map, "map")
        self.unmap = try parse(unmap, "unmap")
    }

    /// Rejects an expression that can never work with `type` (e.g. `value + 1` on a boolean),
    /// before anything is bound.
    func check(against type: DBusType, key: Key) throws(CommandFailure) {
        func keyType(_ name: String) -> DBusType? { name == key.text ? type : nil }
        do {
            _ = try map?.resultType(valueType: type, keyType: keyType)
        } catch {
            throw CommandFailure(.usage, "invalid --map expression for \(key) (type '\(type.signature)'): \(error.message)")
        }
        do {
            _ = try unmap?.resultType(valueType: .string, keyType: keyType)
        } catch {
            throw CommandFailure(.usage, "invalid --unmap expression for \(key): \(error.message)")
        }
    }

    /// The local text for a bus value: `--map`'s result (a string as it is, anything else as
    /// `get` prints it), or the value as `get` prints it.
    func localText(for value: DBusValue, key: Key) throws(ChannelError) -> String {
        guard let map else { return ValueText.format(value) }
        let result: DBusValue
        do {
            result = try map.evaluate(value: value) { $0 == key.text ? value : nil }
        } catch {
            throw ChannelError("--map failed on \(ValueText.format(value)): \(error.message)")
        }
        if case .string(let text) = result.unwrappingVariant { return text }
        return ValueText.format(result)
    }

    /// The bus value for a local text: `--unmap`'s result (a string read by the key's type,
    /// anything else converted to it), or the text read by the key's type.
    func busValue(for text: String, key: Key, type: DBusType, current: DBusValue?) throws(ChannelError) -> DBusValue {
        var textForType = text
        if let unmap {
            let result: DBusValue
            do {
                result = try unmap.evaluate(value: .string(text)) { $0 == key.text ? current : nil }
            } catch {
                throw ChannelError("--unmap failed on \(Self.quoted(text)): \(error.message)")
            }
            guard case .string(let string) = result.unwrappingVariant, type != .string, type != .variant else {
                do { return try Expression.convert(result, to: type) } catch {
                    throw ChannelError("--unmap gave \(ValueText.format(result)) for \(Self.quoted(text)), which does not fit \(key) (type '\(type.signature)'): \(error.message)")
                }
            }
            textForType = string
        }
        do { return try ValueText.parse(textForType, as: type) } catch {
            throw ChannelError("the local value \(Self.quoted(textForType)) does not fit \(key): \(error.message)")
        }
    }

    static func quoted(_ text: String) -> String {
        let short = text.count > 60 ? String(text.prefix(57)) + "..." : text
        return "\"\(short)\""
    }
}

/// Why one value could not cross a channel; printed, never fatal.
struct ChannelError: Error {
    var message: String
    init(_ message: String) { self.message = message }
}
