import CommandLineKit
import DBus
import PropBus

/// propctl's view of propbusd: one bus connection and typed calls to the daemon.
struct PropbusClient {
    static let busName = PropBusAPI.busName
    static let managerInterface = PropBusAPI.managerInterface
    static let valuesInterface = PropBusAPI.valuesInterface
    static let propertiesInterface = PropBusAPI.propertiesInterface

    let connection: Connection

    /// Connects to the bus the global options select.
    static func connect(_ parsed: ParsedCommand) async throws(CommandFailure) -> PropbusClient {
        do {
            return PropbusClient(connection: try await Connection.connect(to: bus(parsed)))
        } catch {
            throw CommandFailure(.unavailable, "cannot connect to the bus: \(error.name): \(error.message)")
        }
    }

    /// A blocking connection to the bus the global options select, for one-shot reads
    /// (``BlockingConnection``: no queue or threads to start).
    static func connectBlocking(_ parsed: ParsedCommand) throws(CommandFailure) -> BlockingConnection {
        do {
            return try BlockingConnection(to: bus(parsed))
        } catch {
            throw CommandFailure(.unavailable, "cannot connect to the bus: \(error.name): \(error.message)")
        }
    }

    /// The bus the global options select.
    static func bus(_ parsed: ParsedCommand) -> BusAddress {
        if let address = parsed.option("address") { return .address(address) }
        return parsed.flag("system") ? .system : .session
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
                                                  member: "Get", arguments: Self.getArguments(key))
            return reply.first?.unwrappingVariantOnce ?? .string("")
        } catch where Self.meansUnknownKey(error) {
            throw await unknownKey(key.text)
        } catch {
            throw CommandFailure(error)
        }
    }

    /// The current value of `key` through a blocking connection (`Properties.Get`).
    static func value(of key: Key, through connection: BlockingConnection) throws(DBusError) -> DBusValue {
        let reply = try connection.call(destination: busName, path: key.objectPath, interface: propertiesInterface,
                                        member: "Get", arguments: getArguments(key))
        return reply.first?.unwrappingVariantOnce ?? .string("")
    }

    private static func getArguments(_ key: Key) -> [DBusValue] { [.string(valuesInterface), .string(key.name)] }

    /// Whether a daemon error means "no such key", whatever layer noticed it: the bus speaks
    /// of objects and properties, the daemon of keys.
    static func meansUnknownKey(_ error: DBusError) -> Bool {
        [DBusError.Name.unknownObject, DBusError.Name.unknownProperty, DBusError.Name.unknownInterface,
         PropBusError.Code.unknownKey.dbusName].contains(error.name)
    }

    /// The one wording for an unknown key, whichever verb met it, with the nearest existing key.
    func unknownKey(_ key: String) async -> CommandFailure {
        let keys = ((try? await list(prefix: "")) ?? []).map(\.key)
        return await notAProperty(key, among: keys) ?? Self.unknown("property", key, among: keys)
    }

    /// The wording for a command or a group named where a property goes (`delete jobs.upper`,
    /// `get settings`): what it is, and the verbs that take it; `nil` when it is neither.
    func notAProperty(_ name: String, among keys: [String]? = nil) async -> CommandFailure? {
        let prefix = PropBusError.Code.unknownKey.dbusName
        // A command's group holds its state keys: it is a command first.
        if ((try? await commands()) ?? []).contains(where: { $0.key == name }) {
            return CommandFailure(.dbusError, "\(prefix): \(name) is a command, not a property: propctl exec \(name) runs it, propctl delete-command \(name) deletes it, propctl list \(name) shows its state")
        }
        var names = keys
        if names == nil { names = ((try? await list(prefix: name)) ?? []).map(\.key) }
        let members = (names ?? []).filter { $0.hasPrefix(name + ".") }.count
        guard members > 0 else { return nil }
        return CommandFailure(.dbusError, "\(prefix): \(name) is a group of \(members) key\(members == 1 ? "" : "s"), not a property: propctl list \(name) shows them")
    }

    /// The one wording for a prefix that names no key and no group (gsettings' "No such
    /// schema"), with the nearest key or group.
    func unknownPrefix(_ prefix: String) async -> CommandFailure {
        let hint = await nearestKeyOrGroup(to: prefix).map { "; did you mean '\($0)'?" } ?? ""
        return CommandFailure(.dbusError, "\(PropBusError.Code.unknownKey.dbusName): no key or group named \(KeyPrefix(prefix).text)\(hint)")
    }

    /// The existing key or group (at any depth) nearest to `prefix`, if one is a likely typo of it.
    func nearestKeyOrGroup(to prefix: String) async -> String? {
        var names = Set<String>()
        for key in ((try? await list(prefix: "")) ?? []).map(\.key) {
            names.insert(key)
            var group = Substring(key)
            while let dot = group.lastIndex(of: ".") {
                group = group[..<dot]
                guard names.insert(String(group)).inserted else { break }
            }
        }
        return closest(to: KeyPrefix(prefix).text, among: names.sorted())
    }

    /// ``list(prefix:)`` for a prefix the user typed: one that selects nothing is an error
    /// (``unknownPrefix(_:)``), since a typo would otherwise print nothing and succeed.
    func selection(_ prefix: String) async throws(CommandFailure) -> [ListedProperty] {
        let items = try await list(prefix: prefix)
        if items.isEmpty, !KeyPrefix(prefix).text.isEmpty { throw await unknownPrefix(prefix) }
        return items
    }

    /// The one wording for an unknown command, with the nearest existing command.
    func unknownCommand(_ key: String) async -> CommandFailure {
        let keys = ((try? await commands()) ?? []).map(\.key)
        return Self.unknown("command", key, among: keys)
    }

    private static func unknown(_ what: String, _ key: String, among keys: [String]) -> CommandFailure {
        let hint = closest(to: key, among: keys).map { "; did you mean '\($0)'?" } ?? ""
        return CommandFailure(.dbusError, "\(PropBusError.Code.unknownKey.dbusName): no \(what) named \(key)\(hint)")
    }

    /// Runs `body`, turning "no such key" errors into the one wording for `key`.
    func naming(_ key: String, _ body: () async throws(CommandFailure) -> [DBusValue]) async throws(CommandFailure) -> [DBusValue] {
        do { return try await body() } catch {
            if error.message.hasPrefix("org.freedesktop.DBus.Error.Unknown") || error.message.hasPrefix(PropBusError.Code.unknownKey.dbusName) {
                throw await unknownKey(key)
            }
            throw error
        }
    }

    /// Every property in the group `prefix` and its subgroups, or the key `prefix` itself
    /// (``KeyPrefix``): `Manager.ListProperties`, whose string prefix is narrowed to that rule.
    func list(prefix: String) async throws(CommandFailure) -> [ListedProperty] {
        let rule = KeyPrefix(prefix)
        return try await listAll(stringPrefix: rule.text).filter { rule.matches($0.key) }
    }

    /// `Manager.ListProperties` as the daemon answers it: keys starting with `stringPrefix`.
    /// Asked as `ListPropertiesCompact` (each definition said once: a fifth of the bytes for a
    /// big listing), or as `ListProperties` from a daemon without it.
    private func listAll(stringPrefix prefix: String) async throws(CommandFailure) -> [ListedProperty] {
        do {
            let reply = try await connection.call(destination: Self.busName, path: Key.rootPath, interface: Self.managerInterface,
                                                  member: "ListPropertiesCompact", arguments: [.string(prefix)])
            return ListedProperty.rows(ofCompactListing: reply)
        } catch where error.name != DBusError.Name.unknownMethod {
            throw CommandFailure(error)
        } catch {}
        let reply = try await manager("ListProperties", [.string(prefix)])
        guard case .array(_, let items)? = reply.first else { return [] }
        return items.compactMap { item in
            guard case .structure(let fields) = item, fields.count == 4,
                  let key = fields[0].stringValue, let type = fields[1].stringValue else { return nil }
            return ListedProperty(key: key, type: type, value: fields[2].unwrappingVariantOnce,
                                  metadata: (fields[3].stringKeyedEntries ?? [:]).mapValues(\.unwrappingVariantOnce))
        }
    }

    /// A binding as `Manager.ListBindingsPage` lists it.
    struct ListedBinding {
        var path: String
        var key: String
        var to: String
        var options: [String: DBusValue]
    }

    /// Every binding with an end starting with `prefix` (a string prefix), page after page, so
    /// any number of bindings can be listed (`Manager.ListBindingsPage`).
    func bindings(prefix: String = "") async throws(CommandFailure) -> [ListedBinding] {
        var rows: [DBusValue] = []
        var after: UInt64 = 0
        repeat {
            let reply = try await manager("ListBindingsPage", [.string(prefix), .uint64(after), .uint32(0)])
            guard reply.count == 2, case .array(_, let page) = reply[0], case .uint64(let next) = reply[1] else {
                throw CommandFailure(.dbusError, "propbusd answered ListBindingsPage with \(reply)")
            }
            rows += page
            after = next
        } while after != 0
        return rows.compactMap { row in
            guard case .structure(let fields) = row, fields.count == 4, let path = fields[0].stringValue,
                  let key = fields[1].stringValue, let to = fields[2].stringValue else { return nil }
            return ListedBinding(path: path, key: key, to: to, options: (fields[3].stringKeyedEntries ?? [:]).mapValues(\.unwrappingVariantOnce))
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

    /// Every running execution: id, command key and the unique name of its caller
    /// (`Manager.ListExecutions`).
    func executions() async throws(CommandFailure) -> [(id: UInt64, key: String, caller: String)] {
        let reply = try await manager("ListExecutions")
        guard case .array(_, let items)? = reply.first else { return [] }
        return items.compactMap { item in
            guard case .structure(let fields) = item, fields.count == 3, case .uint64(let id) = fields[0],
                  let key = fields[1].stringValue, let caller = fields[2].stringValue else { return nil }
            return (id, key, caller)
        }
    }

    /// The type of `key`, for reading a VALUE argument.
    func type(of key: Key) async throws(CommandFailure) -> DBusType {
        guard let listed = try await list(prefix: key.text).first(where: { $0.key == key.text }) else {
            throw await unknownKey(key.text)
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

    /// The rows of a `ListPropertiesCompact` reply, as `ListProperties` says them: each row's
    /// metadata is its shape's with the row's own fields.
    static func rows(ofCompactListing reply: [DBusValue]) -> [ListedProperty] {
        guard reply.count == 2, case .array(_, let items) = reply[0], case .array(_, let shapeItems) = reply[1] else { return [] }
        let shapes = shapeItems.map { item -> (type: String, metadata: [String: DBusValue])? in
            guard case .structure(let fields) = item, fields.count == 2, let type = fields[0].stringValue,
                  let metadata = fields[1].stringKeyedEntries else { return nil }
            return (type, metadata.mapValues(\.unwrappingVariantOnce))
        }
        return items.compactMap { item in
            guard case .structure(let fields) = item, fields.count == 6, let key = fields[0].stringValue,
                  case .uint32(let index) = fields[1], Int(index) < shapes.count, let shape = shapes[Int(index)] else { return nil }
            var metadata = shape.metadata
            metadata["revision"] = fields[3]
            metadata["is_set"] = fields[4]
            for (name, value) in fields[5].stringKeyedEntries ?? [:] { metadata[name] = value.unwrappingVariantOnce }
            return ListedProperty(key: key, type: shape.type, value: fields[2].unwrappingVariantOnce, metadata: metadata)
        }
    }
}
