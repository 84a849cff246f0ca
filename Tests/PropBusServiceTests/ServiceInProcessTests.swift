import DBus
import Foundation
import PropBus
@testable import PropBusService
import StoreTestSupport
import XCTest

/// The service, object tree and connection in this process, on a private bus, with a store in
/// memory: no daemon binary, no SQLite. What the integration tests check through propbusd,
/// checked here at the seams (the round, the vtable's write flag, the tree's signals).
final class ServiceInProcessTests: XCTestCase, @unchecked Sendable {
    private var bus: TestBus!
    private var serviceConnection: Connection!
    private var client: Connection!
    private var service: Service?
    private let store = RefusingStore()

    override func setUp() async throws {
        bus = try TestBus.start()
        serviceConnection = try await bus.connect()
        client = try await bus.connect()
        let store = store
        // Made and kept on the service's queue: the service is not Sendable.
        try await onQueue(serviceConnection) { [self, serviceConnection] () throws in
            let model = try PropertyModel(store: store)
            _ = try model.create(key: "app.volume", type: "i", defaultValue: .int32(1))
            _ = try model.create(key: "app.marker", type: "i", defaultValue: .int32(0))
            model.commitRound()
            service = Service(connection: serviceConnection!, model: model, store: store)
        }
    }

    override func tearDown() async throws {
        if let serviceConnection { _ = await onQueue(serviceConnection) { [self] in service = nil } }
        serviceConnection?.close()
        client?.close()
        bus?.stop()
    }

    private var group: String { Key.objectPath(ofGroup: "app") }

    /// This process's resident set size, in bytes (`/proc/self/statm`).
    private static func residentBytes() -> Int {
        let fields = ((try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8)) ?? "").split(separator: " ")
        return (fields.count > 1 ? Int(fields[1]) ?? 0 : 0) * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    private func get(_ name: String) async throws -> DBusValue {
        let reply = try await client.call(destination: serviceConnection.uniqueName, path: group, interface: PropBusAPI.propertiesInterface,
                                          member: "Get", arguments: [.string(PropBusAPI.valuesInterface), .string(name)])
        return reply.first?.unwrappingVariantOnce ?? .string("")
    }

    private func set(_ name: String, _ value: DBusValue) async throws {
        _ = try await client.call(destination: serviceConnection.uniqueName, path: group, interface: PropBusAPI.propertiesInterface,
                                  member: "Set", arguments: [.string(PropBusAPI.valuesInterface), .string(name), .variant(value)])
    }

    /// The PropertiesChanged signals of the group, in arrival order.
    private func recordChanges() async throws -> ChangeLog {
        let log = ChangeLog()
        let rule = MatchRule(sender: serviceConnection.uniqueName, path: group, interface: PropBusAPI.propertiesInterface, member: "PropertiesChanged")
        _ = await onQueue(client) { [client] in
            client!.addSignalHandler(matching: rule) { message in
                guard let arguments = try? message.arguments(), arguments.count == 3,
                      let changed = arguments[1].stringKeyedEntries else { return }
                log.append(changed.mapValues(\.unwrappingVariantOnce))
            }
        }
        try await client.addMatch(rule)
        return log
    }

    /// Access control comes from the method table: every method that
    /// writes declares the privilege it needs, and so do the command methods and the model-file
    /// methods; only the listings (which filter what they show) and UnregisterHandler (its owner
    /// only, by the command table) declare none. (The fleet's members of the Manager, which the
    /// daemon adds, are checked in PropBusFleetTests.)
    func testEveryWritingMethodDeclaresItsPrivilege() async throws {
        let open = try await onQueue(serviceConnection) { [self] () throws -> [String] in
            let service = service!
            let methods = service.managerDescription().methods.values.map { $0 }
                + service.valuesDescription(group: "app").methods.values.map { $0 }
                + service.commandDescription(try Key("app.run")).methods.values.map { $0 }
            let unchecked = methods.filter { $0.writes && $0.access.isNone }.map(\.name)
            XCTAssertEqual(unchecked, [], "methods that write but declare no privilege")
            return methods.filter(\.access.isNone).map(\.name).sorted()
        }
        XCTAssertEqual(open, ["ListBindings", "ListBindingsPage", "ListCommands", "ListExecutions", "ListHistory", "ListProperties", "ListPropertiesCompact", "ListUsage", "UnregisterHandler"])
    }

    /// The description a group's table builds per lookup (every Set, every
    /// flushed PropertiesChanged, Introspect, reads of restricted keys) is freed with its
    /// closures. Its `deferrableSet` captured the `var` holding the description: a box that held
    /// the closure that held the box, never freed. A closure's context is no object a `weak`
    /// reference could watch (and glibc's `mallinfo2` does not import), so the test compares
    /// this process's resident size around 50,000 lookups: the cycle kept ~700 bytes each.
    func testPropertyDescriptionsBuiltPerLookupAreFreed() async throws {
        let grown = await onQueue(serviceConnection) { [self] () -> Int in
            guard case .computed(let table) = service!.valuesDescription(group: "app").properties else {
                XCTFail("the values interface has no computed table")
                return 0
            }
            func lookUp(_ count: Int) {
                for _ in 0..<count {
                    guard let description = table.lookup("volume") else { return }
                    precondition(description.deferrableSet != nil)
                }
            }
            lookUp(5000)
            let before = Self.residentBytes()
            lookUp(50_000)
            return Self.residentBytes() - before
        }
        XCTAssertLessThan(grown, 4 << 20, "50,000 lookups kept \(grown) bytes")
    }

    /// Memory: a round that changed thousands of keys (the fleet's full read of etcd,
    /// 10,000 definitions offered one by one) hands the memory it used for a moment back to the
    /// kernel, once, when the queue sees no more work; interactive rounds never pay for it. Without it a
    /// host mirroring 10,000 fleet keys kept 16 MiB free but resident (48 MiB RSS against 25 for
    /// the same keys held locally).
    func testThousandsOfChangesReleaseTheirFreedMemoryOnceAndSmallRoundsNever() async throws {
        let releases = ReleaseCounter()
        _ = await onQueue(serviceConnection) { [self] in
            service!.releaseFreeMemory = { releases.count += 1 }
            // Released at the queue's next turn that sees no more work, instead of a second later.
            service!.freeMemoryQuietPeriod = .seconds(0)
        }
        for value in 2..<22 { try await set("volume", .int32(Int32(value))) }
        _ = await onQueue(serviceConnection) {}
        XCTAssertEqual(releases.count, 0, "20 one-key rounds released memory")
        try await onQueue(serviceConnection) { [self] () throws in
            let service = service!
            var changes: [PropertyChange] = []
            for n in 0..<3000 { changes += try service.model.create(key: "bulk.p\(n)", type: "i", defaultValue: .int32(0)) }
            service.publish(changes)
            XCTAssertNil(service.commit())
            XCTAssertEqual(releases.count, 0, "released before the round's caller was done with its own data")
        }
        _ = await onQueue(serviceConnection) {}
        XCTAssertEqual(releases.count, 1, "a round of 3,000 creations")
        for value in 30..<40 { try await set("volume", .int32(Int32(value))) }
        _ = await onQueue(serviceConnection) {}
        XCTAssertEqual(releases.count, 1, "counting starts again after a release")
    }

    /// The daemon's LimitsExceeded says the real size, and which limit.
    func testAReplyTooLargeSaysItsRealSizeAndWhichLimit() throws {
        let call = try Message.methodCall(destination: nil, path: "/", interface: "org.freedesktop.DBus.ObjectManager", member: "GetManagedObjects")
        let overMessage = Service.replyTooLarge(call, size: MessageSize(bytes: 70 << 20, largestArray: 69 << 20), limit: 32 << 20)
        XCTAssertTrue(overMessage.message.contains("would be \(70 << 20) bytes, more than the \(32 << 20)-byte message limit (--max-message-size)"), overMessage.message)
        let overArray = Service.replyTooLarge(call, size: MessageSize(bytes: 70 << 20, largestArray: 69 << 20), limit: 128 << 20)
        XCTAssertTrue(overArray.message.contains("would hold an array of \(69 << 20) bytes, more than the \(64 << 20) bytes"), overArray.message)
        XCTAssertFalse(overArray.message.contains("--max-message-size"), "raising the message limit would not help: \(overArray.message)")
        XCTAssertTrue(overArray.message.contains("read one group at a time"), overArray.message)
    }

    /// A Set on a group's computed table, and the PropertiesChanged its round's flush
    /// sends, build no property description (with its closures) per call: the table's `lookup`
    /// is never asked. Nor is it for a read-only key's refusal, which says why without a write.
    func testSetAndItsSignalBuildNoPropertyDescription() async throws {
        let lookups = Tally()
        let path = group
        try await onQueue(serviceConnection) { [self] () throws in
            let service = service!
            _ = try service.model.create(key: "app.fixed", type: "i", defaultValue: .int32(3), options: ["writable": .boolean(false)])
            service.model.commitRound()
            // The group's own description, its lookups counted.
            var description = service.valuesDescription(group: "app")
            guard case .computed(var table) = description.properties else { return XCTFail("the values interface has no computed table") }
            let lookup = table.lookup
            table.lookup = { lookups.add(); return lookup($0) }
            description.properties = .computed(table)
            service.tree.export(ExportedObject { [description] }, at: path, announce: false)
        }
        let changes = try await recordChanges()
        try await set("volume", .int32(5))
        do {
            try await set("fixed", .int32(4))
            XCTFail("a read-only key was written")
        } catch let error as DBusError {
            XCTAssertEqual(error.name, DBusError.Name.propertyReadOnly, error.message)
            XCTAssertEqual(error.message, "property app.fixed is read-only")
        }
        try await set("marker", .int32(1))  // barrier: its signal comes after any for volume
        let arrived = await changes.wait { $0.contains { $0["marker"] == .int32(1) } }
        XCTAssertEqual(arrived.compactMap { $0["volume"] }, [.int32(5)], "\(arrived)")
        let fixed = try await get("fixed")
        XCTAssertEqual(fixed, .int32(3))
        XCTAssertEqual(lookups.count, 0, "property descriptions built for two Sets, a refusal and their signals")
    }

    /// `ListPropertiesCompact` says what `ListProperties` says, each distinct
    /// definition once (a 10k-key listing is then a quarter of the bytes the bus relays and the
    /// client reads): every row put back together from its shape is the full listing's row.
    func testTheCompactListingSaysWhatTheFullListingSays() async throws {
        try await onQueue(serviceConnection) { [self] () throws in
            let model = service!.model
            _ = try model.create(key: "app.ranged", type: "i", defaultValue: .int32(5), options: [
                "minimum": .int32(0), "maximum": .int32(9), "description": .string("a range"), "writers": .array(of: .string, [.string("root")])])
            _ = try model.create(key: "app.word", type: "s", defaultValue: .string("é"), options: ["persistent": .boolean(false)])
            // Canonically equal to the one above, but other bytes: another shape.
            _ = try model.create(key: "app.word2", type: "s", defaultValue: .string("e\u{301}"), options: ["persistent": .boolean(false)])
            _ = try model.create(key: "other.flag", type: "b", defaultValue: .boolean(false), options: ["choices": .array(of: .variant, [.variant(.boolean(false))])])
            _ = try model.set("app.volume", to: .int32(7))
            // Layers are the entry's own fields: a locked key (its user value hidden, not
            // writable for this caller) and a site default.
            _ = try model.create(key: "app.locked", type: "i", defaultValue: .int32(1))
            _ = try model.set("app.locked", to: .int32(3))
            _ = try model.create(key: "app.site", type: "i", defaultValue: .int32(1))
            _ = model.applyLayerFiles(LayerFileSet(entries: [
                LayerEntry(layer: .mandatory, target: .key(try Key("app.locked")), value: .integer(2), lockedFor: nil, source: "/etc/propbus/mandatory.d/a.json"),
                LayerEntry(layer: .site, target: .key(try Key("app.site")), value: .integer(4), lockedFor: nil, source: "/etc/propbus/defaults.d/b.json"),
            ]))
            model.commitRound()
        }
        let destination = serviceConnection.uniqueName, root = Key.rootPath, manager = PropBusAPI.managerInterface
        for prefix in ["", "app.", "app.w", "nothing."] {
            let full = try await client.call(destination: destination, path: root, interface: manager, member: "ListProperties", arguments: [.string(prefix)])
            let compact = try await client.call(destination: destination, path: root, interface: manager, member: "ListPropertiesCompact", arguments: [.string(prefix)])
            guard full.count == 1, case .array(_, let fullRows) = full[0], compact.count == 2,
                  case .array(_, let rows) = compact[0], case .array(_, let shapes) = compact[1] else {
                return XCTFail("unexpected replies \(full) \(compact)")
            }
            var rebuilt: [DBusValue] = []
            for row in rows {
                guard case .structure(let fields) = row, fields.count == 6, case .uint32(let index) = fields[1], Int(index) < shapes.count,
                      case .structure(let shape) = shapes[Int(index)], shape.count == 2,
                      var metadata = shape[1].stringKeyedEntries, let extra = fields[5].stringKeyedEntries else {
                    return XCTFail("unexpected row \(row) of \(shapes)")
                }
                metadata["revision"] = fields[3]
                metadata["is_set"] = fields[4]
                // A row's own field wins over its shape's (`writable` for a locked key).
                metadata.merge(extra) { _, row in row }
                rebuilt.append(.structure([fields[0], shape[0], fields[2], .vardict(metadata.mapValues(\.unwrappingVariantOnce))]))
            }
            XCTAssertEqual(rebuilt, fullRows, "prefix '\(prefix)'")
            if prefix == "" { XCTAssertEqual(shapes.count, 6, "one shape per distinct definition: \(shapes)") }
            if prefix == "app." {
                XCTAssertTrue(fullRows.contains { "\($0)".contains("user_value") && "\($0)".contains("mandatory.d/a.json") }, "\(fullRows)")
            }
        }
    }

    func testCallsReachTheModelAndChangesAreSignalledOnce() async throws {
        let before = try await get("volume")
        XCTAssertEqual(before, .int32(1))
        let changes = try await recordChanges()
        try await set("volume", .int32(5))
        try await set("volume", .int32(5))  // no-op: no second signal
        try await set("marker", .int32(1))  // barrier: its signal comes after any for volume
        let arrived = await changes.wait { $0.contains { $0["marker"] == .int32(1) } }
        XCTAssertEqual(arrived.compactMap { $0["volume"] }, [.int32(5)], "\(arrived)")
        let after = try await get("volume")
        XCTAssertEqual(after, .int32(5))
    }

    func testARefusedCommitFailsTheWriteUndoesItAndDropsItsSignal() async throws {
        let changes = try await recordChanges()
        store.refuseNextCommit = true
        do {
            try await set("volume", .int32(9))
            XCTFail("the write was acknowledged although the store refused it")
        } catch let error as DBusError {
            XCTAssertEqual(error.name, PropBusError.Code.storeFailed.dbusName, error.message)
        }
        let after = try await get("volume")
        XCTAssertEqual(after, .int32(1), "the round was rolled back")
        try await set("marker", .int32(1))
        let arrived = await changes.wait { $0.contains { $0["marker"] == .int32(1) } }
        XCTAssertEqual(arrived.compactMap { $0["volume"] }, [], "the rolled-back change was announced: \(arrived)")
    }
}

/// A count, bumped on the service's queue and read from the test.
final class Tally: @unchecked Sendable {
    private let lock = NSLock()
    private var value = 0

    func add() {
        lock.lock()
        value += 1
        lock.unlock()
    }

    var count: Int {
        lock.lock()
        defer { lock.unlock() }
        return value
    }
}

/// Changed-property dictionaries, appended on the client's queue and read from the test.
/// How many times the service released memory: written on its queue, read after a barrier on it.
final class ReleaseCounter: @unchecked Sendable {
    var count = 0
}

final class ChangeLog: @unchecked Sendable {
    private let lock = NSLock()
    private var entries: [[String: DBusValue]] = []

    func append(_ changed: [String: DBusValue]) {
        lock.lock()
        entries.append(changed)
        lock.unlock()
    }

    var all: [[String: DBusValue]] {
        lock.lock()
        defer { lock.unlock() }
        return entries
    }

    /// Waits (at most 10 s) until `condition` holds, and returns what arrived.
    func wait(_ condition: ([[String: DBusValue]]) -> Bool) async -> [[String: DBusValue]] {
        let deadline = Date().addingTimeInterval(10)
        while !condition(all), Date() < deadline { try? await Task.sleep(nanoseconds: 2_000_000) }
        return all
    }
}
