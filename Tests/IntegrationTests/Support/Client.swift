import DBus
import Foundation
import PropBus

/// Names of the daemon's API, as a client spells them.
enum PropBusAPI {
    static let busName = "org.propbus.PropBus1"
    static let rootPath = "/org/propbus/PropBus1"
    static let manager = "org.propbus.PropBus1.Manager"
    static let values = "org.propbus.PropBus1.Values"
    static let properties = "org.freedesktop.DBus.Properties"
    static let objectManager = "org.freedesktop.DBus.ObjectManager"
    static let introspectable = "org.freedesktop.DBus.Introspectable"
    static let peer = "org.freedesktop.DBus.Peer"

    /// The full D-Bus name of a propbus error, e.g. `error("UnknownKey")`.
    static func error(_ name: String) -> String { "org.propbus.PropBus1.Error." + name }
    /// The full D-Bus name of a standard error, e.g. `standard("InvalidArgs")`.
    static func standard(_ name: String) -> String { "org.freedesktop.DBus.Error." + name }

    /// The group object path and the property name of `key`.
    static func locate(_ key: String) -> (path: String, name: String) {
        guard let parsed = try? Key(key) else { preconditionFailure("test uses an invalid key \(key)") }
        return (parsed.objectPath, parsed.name)
    }
}

/// A propbus client built on the project's own `DBus` library, with its own bus connection.
///
/// `@unchecked Sendable`: `Connection` is itself thread-safe for everything used here.
final class Client: @unchecked Sendable {
    let connection: Connection

    private init(connection: Connection) { self.connection = connection }

    static func connect(to bus: PrivateBus) async throws -> Client {
        Client(connection: try await Connection.connect(to: .address(bus.address)))
    }

    func close() { connection.close() }

    /// A method call with a timeout, so a daemon that never answers fails the test instead of hanging it.
    @discardableResult
    func call(at path: String = PropBusAPI.rootPath, _ interface: String, _ member: String,
              _ arguments: [DBusValue] = [], destination: String = PropBusAPI.busName) async throws -> [DBusValue] {
        try await connection.call(destination: destination, path: path, interface: interface, member: member,
                                  arguments: arguments, timeoutMilliseconds: 20_000)
    }

    // MARK: Manager

    func create(_ key: String, _ type: String, default defaultValue: DBusValue,
                options: [String: DBusValue] = [:]) async throws {
        try await call(PropBusAPI.manager, "CreateProperty",
                       [.string(key), .string(type), .variant(defaultValue), .vardict(options)])
    }

    func delete(_ key: String) async throws {
        try await call(PropBusAPI.manager, "DeleteProperty", [.string(key)])
    }

    /// `Apply` with assignments in the given order.
    func apply(set assignments: [(String, DBusValue)], reset: [String] = []) async throws {
        let entries = assignments.map { DictionaryEntry(.string($0.0), .variant($0.1)) }
        try await call(PropBusAPI.manager, "Apply", [
            .dictionary(key: .string, value: .variant, entries),
            .array(of: .string, reset.map { .string($0) }),
        ])
    }

    /// One row of `ListProperties`.
    struct Listed: Sendable {
        var key: String
        var type: String
        var value: DBusValue
        var metadata: [String: DBusValue]
    }

    func list(prefix: String = "") async throws -> [Listed] {
        let reply = try await call(PropBusAPI.manager, "ListProperties", [.string(prefix)])
        guard case .array(_, let rows)? = reply.first else { throw TestSetupError("ListProperties replied \(reply)") }
        return try rows.map { row in
            guard case .structure(let fields) = row, fields.count == 4,
                  let key = fields[0].stringValue, let type = fields[1].stringValue,
                  let metadata = fields[3].stringKeyedEntries else {
                throw TestSetupError("ListProperties row \(row)")
            }
            return Listed(key: key, type: type, value: fields[2].unwrappingVariantOnce,
                          metadata: metadata.mapValues(\.unwrappingVariantOnce))
        }
    }

    // MARK: Values

    func get(_ key: String) async throws -> DBusValue {
        let (path, name) = PropBusAPI.locate(key)
        let reply = try await call(at: path, PropBusAPI.properties, "Get", [.string(PropBusAPI.values), .string(name)])
        guard reply.count == 1, case .variant(let value) = reply[0] else { throw TestSetupError("Get replied \(reply)") }
        return value
    }

    func set(_ key: String, _ value: DBusValue) async throws {
        let (path, name) = PropBusAPI.locate(key)
        try await call(at: path, PropBusAPI.properties, "Set", [.string(PropBusAPI.values), .string(name), .variant(value)])
    }

    func getAll(group: String) async throws -> [String: DBusValue] {
        let reply = try await call(at: Key.objectPath(ofGroup: group), PropBusAPI.properties, "GetAll", [.string(PropBusAPI.values)])
        guard let entries = reply.first?.stringKeyedEntries else { throw TestSetupError("GetAll replied \(reply)") }
        return entries.mapValues(\.unwrappingVariantOnce)
    }

    func reset(_ key: String) async throws {
        let (path, name) = PropBusAPI.locate(key)
        try await call(at: path, PropBusAPI.values, "Reset", [.string(name)])
    }

    func getWithRevision(_ key: String) async throws -> (value: DBusValue, revision: UInt64) {
        let (path, name) = PropBusAPI.locate(key)
        let reply = try await call(at: path, PropBusAPI.values, "GetWithRevision", [.string(name)])
        guard reply.count == 2, case .variant(let value) = reply[0], case .uint64(let revision) = reply[1] else {
            throw TestSetupError("GetWithRevision replied \(reply)")
        }
        return (value, revision)
    }

    @discardableResult
    func compareAndSet(_ key: String, revision: UInt64, _ value: DBusValue) async throws -> UInt64 {
        let (path, name) = PropBusAPI.locate(key)
        let reply = try await call(at: path, PropBusAPI.values, "CompareAndSet", [.string(name), .uint64(revision), .variant(value)])
        guard reply.count == 1, case .uint64(let next) = reply[0] else { throw TestSetupError("CompareAndSet replied \(reply)") }
        return next
    }

    func introspect(_ path: String) async throws -> String {
        let reply = try await call(at: path, PropBusAPI.introspectable, "Introspect")
        guard let xml = reply.first?.stringValue else { throw TestSetupError("Introspect replied \(reply)") }
        return xml
    }

    func nameHasOwner(_ name: String = PropBusAPI.busName) async throws -> Bool {
        let reply = try await connection.callBus("NameHasOwner", [.string(name)])
        return reply.first?.boolValue ?? false
    }

    // MARK: Signals

    /// Subscribes to the daemon's signals matching the given fields and records them from now on.
    /// The match is confirmed by the bus before this returns, so nothing sent afterwards is missed.
    func record(path: String? = nil, pathNamespace: String? = nil, interface: String? = nil,
                member: String? = nil) async throws -> SignalRecorder {
        let rule = MatchRule(sender: PropBusAPI.busName, path: path, pathNamespace: pathNamespace,
                             interface: interface, member: member)
        let recorder = SignalRecorder()
        connection.queue.sync {
            // The sender in the rule is a well-known name, which `matches` cannot check locally;
            // every signal on this private bus that passes the other fields comes from propbusd.
            _ = connection.addSignalHandler(matching: rule) { message in
                recorder.append(ReceivedSignal(message))
            }
        }
        try await connection.addMatch(rule)
        return recorder
    }

    /// Records `PropertiesChanged` of one group object.
    func recordChanges(ofGroup group: String) async throws -> SignalRecorder {
        try await record(path: Key.objectPath(ofGroup: group), interface: PropBusAPI.properties, member: "PropertiesChanged")
    }
}

/// A received signal, decoded on the connection's queue.
struct ReceivedSignal: Sendable, CustomStringConvertible {
    var path: String
    var interface: String
    var member: String
    var arguments: [DBusValue]

    init(_ message: Message) {
        path = message.path ?? ""
        interface = message.interface ?? ""
        member = message.member ?? ""
        arguments = (try? message.arguments()) ?? []
    }

    /// For `PropertiesChanged`: the changed properties, unwrapped.
    var changed: [String: DBusValue] {
        guard arguments.count == 3, let entries = arguments[1].stringKeyedEntries else { return [:] }
        return entries.mapValues(\.unwrappingVariantOnce)
    }

    /// For `PropertiesChanged`: the invalidated property names.
    var invalidated: [String] {
        guard arguments.count == 3, case .array(_, let names) = arguments[2] else { return [] }
        return names.compactMap(\.stringValue)
    }

    var description: String { "\(path) \(interface).\(member)\(arguments)" }
}

/// Collects signals delivered on a connection's queue, for a test to read from anywhere.
final class SignalRecorder: @unchecked Sendable {
    // @unchecked: `received` is only touched under `lock`.
    private let lock = NSLock()
    private var received: [ReceivedSignal] = []

    func append(_ signal: ReceivedSignal) {
        lock.lock()
        received.append(signal)
        lock.unlock()
    }

    var signals: [ReceivedSignal] {
        lock.lock()
        defer { lock.unlock() }
        return received
    }

    /// Waits until `condition` holds for the signals received so far; returns them either way.
    @discardableResult
    func wait(timeout: TimeInterval = 10, until condition: ([ReceivedSignal]) -> Bool) async -> [ReceivedSignal] {
        _ = await eventually(timeout: timeout) { condition(signals) }
        return signals
    }

    /// Waits until at least `count` signals arrived.
    @discardableResult
    func wait(count: Int, timeout: TimeInterval = 10) async -> [ReceivedSignal] {
        await wait(timeout: timeout) { $0.count >= count }
    }
}
