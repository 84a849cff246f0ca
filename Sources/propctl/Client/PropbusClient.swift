import DBus
import PropBus

/// propctl's view of propbusd: one bus connection and typed calls to the daemon.
struct PropbusClient {
    static let busName = "org.propbus.PropBus1"
    static let managerInterface = "org.propbus.PropBus1.Manager"
    static let valuesInterface = "org.propbus.PropBus1.Values"
    static let propertiesInterface = "org.freedesktop.DBus.Properties"

    let connection: Connection

    /// Connects to the bus the global options select.
    static func connect(_ parsed: ParsedCommand) async throws(CommandFailure) -> PropbusClient {
        let bus: BusAddress
        if let address = parsed.option("address") {
            bus = .address(address)
        } else if parsed.flag("system") {
            bus = .system
        } else {
            bus = .session
        }
        do {
            return PropbusClient(connection: try await Connection.connect(to: bus))
        } catch {
            throw CommandFailure(.unavailable, "cannot connect to the bus: \(error.name): \(error.message)")
        }
    }

    /// Calls a method of the daemon, mapping errors to exit codes.
    func call(_ path: String, _ interface: String, _ member: String, _ arguments: [DBusValue] = []) async throws(CommandFailure) -> [DBusValue] {
        do {
            return try await connection.call(destination: Self.busName, path: path, interface: interface,
                                             member: member, arguments: arguments)
        } catch {
            throw CommandFailure(error)
        }
    }

    /// Calls a Manager method on the root object.
    func manager(_ member: String, _ arguments: [DBusValue] = []) async throws(CommandFailure) -> [DBusValue] {
        try await call(Key.rootPath, Self.managerInterface, member, arguments)
    }

    /// Parses `text` as a key, as a usage error if it is malformed.
    static func key(_ text: String) throws(CommandFailure) -> Key {
        do { return try Key(text) } catch { throw CommandFailure(.usage, error.message) }
    }

    /// The current value of `key` (`Properties.Get`).
    func value(of key: Key) async throws(CommandFailure) -> DBusValue {
        do {
            let reply = try await connection.call(destination: Self.busName, path: key.objectPath, interface: Self.propertiesInterface,
                                                  member: "Get", arguments: [.string(Self.valuesInterface), .string(key.name)])
            return reply.first?.unwrappingVariantOnce ?? .string("")
        } catch where error.name == DBusError.Name.unknownObject || error.name == DBusError.Name.unknownProperty {
            // The bus speaks of objects and properties; the user asked for a key.
            throw CommandFailure(DBusError(name: error.name, message: "no property named \(key) (\(error.message))"))
        } catch {
            throw CommandFailure(error)
        }
    }

    /// Every property whose key starts with `prefix` (`Manager.ListProperties`).
    func list(prefix: String) async throws(CommandFailure) -> [ListedProperty] {
        let reply = try await manager("ListProperties", [.string(prefix)])
        guard case .array(_, let items)? = reply.first else { return [] }
        return items.compactMap { item in
            guard case .structure(let fields) = item, fields.count == 4,
                  let key = fields[0].stringValue, let type = fields[1].stringValue else { return nil }
            return ListedProperty(key: key, type: type, value: fields[2].unwrappingVariantOnce,
                                  metadata: (fields[3].stringKeyedEntries ?? [:]).mapValues(\.unwrappingVariantOnce))
        }
    }

    /// Every command with its options and state (`Manager.ListCommands`).
    func commands() async throws(CommandFailure) -> [(key: String, info: [String: DBusValue])] {
        let reply = try await manager("ListCommands")
        guard case .array(_, let items)? = reply.first else { return [] }
        return items.compactMap { item in
            guard case .structure(let fields) = item, fields.count == 2, let key = fields[0].stringValue else { return nil }
            return (key, (fields[1].stringKeyedEntries ?? [:]).mapValues(\.unwrappingVariantOnce))
        }
    }

    /// The type of `key`, for reading a VALUE argument.
    func type(of key: Key) async throws(CommandFailure) -> DBusType {
        guard let listed = try await list(prefix: key.text).first(where: { $0.key == key.text }) else {
            throw CommandFailure(.dbusError, "org.propbus.PropBus1.Error.UnknownKey: no property named \(key)")
        }
        do { return try DBusType(parsing: listed.type) } catch {
            throw CommandFailure(.dbusError, "the daemon reported an invalid type '\(listed.type)' for \(key)")
        }
    }
}

/// One row of `ListProperties`.
struct ListedProperty {
    var key: String
    var type: String
    var value: DBusValue
    var metadata: [String: DBusValue]
}
