import DBus
import Foundation
import PropBus
@testable import PropBusService
import XCTest

/// A history port that answers from canned records and writes down what the service asked of
/// it. Touched on the service's queue only (the test reads it through `onQueue`).
final class RecordingHistory: HistoryStore, @unchecked Sendable {
    var historyIsEnabled = true
    var recordsDenied = true
    /// What `history(prefix:…)` and `history(of:…)` answer from.
    var records: [HistoryRecord] = []
    /// Every question asked, in order, as `method argument`.
    private(set) var asked: [String] = []
    /// Refused attempts held, and those a flush wrote.
    private(set) var held: [DeniedAttempt] = []
    private(set) var written: [DeniedAttempt] = []
    /// Pruning steps left: the port needs pruning while some are.
    var pruningStepsLeft = 0
    private(set) var pruningSteps = 0

    func scanHistory(_ query: HistoryQuery, examining budget: Int, _ body: (HistoryRecord) -> Bool) -> HistoryScanEnd {
        asked.append("prefix \(query.prefix)")
        var examined = 0
        for record in records where record.revision > query.after {
            if query.isPast(record) { break }
            examined += 1
            if query.selects(record), !body(record) { return HistoryScanEnd(next: record.revision - 1, examined: examined) }
        }
        return HistoryScanEnd(next: nil, examined: examined)
    }

    func historyUsage() -> [UInt32: UInt64] { [:] }

    func history(of key: Key, atOrBefore revision: UInt64) -> (then: HistoryRecord?, latest: HistoryRecord?) {
        asked.append("key \(key.text)")
        let mine = records.filter { $0.key == key }
        return (mine.last { $0.revision <= revision }, mine.last)
    }

    func history(ofChange change: UInt64) -> [HistoryRecord] {
        asked.append("change \(change)")
        return records.filter { $0.change == change }
    }

    func recordDenied(_ attempt: DeniedAttempt) { held.append(attempt) }

    func flushDenied() {
        written += held
        held.removeAll()
    }

    func deniedAttempts(prefix: String, after: Int64, limit: Int) -> [(id: Int64, attempt: DeniedAttempt)] {
        asked.append("denied \(prefix)")
        return written.enumerated().map { (Int64($0.offset + 1), $0.element) }.filter { $0.0 > after && $0.1.key.hasPrefix(prefix) }
    }

    var historyNeedsPruning: Bool { pruningStepsLeft > 0 }

    func pruneHistory() -> Bool {
        pruningSteps += 1
        pruningStepsLeft -= 1
        return pruningStepsLeft > 0
    }
}

/// The service reads, reverts and feeds history through its own port (`HistoryStore`), not
/// through the store it commits to: what it asks of the port, and what it answers without one.
final class HistoryPortTests: XCTestCase, @unchecked Sendable {
    private var bus: TestBus!
    private var serviceConnection: Connection!
    private var client: Connection!
    private var service: Service?
    private let history = RecordingHistory()

    override func setUp() async throws {
        try await start(history: history)
    }

    /// A service on a fresh bus with `history` (`nil`: none, as with `--in-memory`), and a key
    /// locked for everyone, root included.
    private func start(history: RecordingHistory?) async throws {
        bus = try TestBus.start()
        serviceConnection = try await bus.connect()
        client = try await bus.connect()
        try await onQueue(serviceConnection) { [self, serviceConnection] () throws in
            let store = MemoryStore()
            let model = try PropertyModel(store: store)
            _ = try model.create(key: "app.volume", type: "i", defaultValue: .int32(1))
            _ = try model.create(key: "app.marker", type: "i", defaultValue: .int32(0))
            _ = try model.create(key: "app.locked", type: "i", defaultValue: .int32(1))
            _ = model.applyLayerFiles(LayerFileSet(entries: [
                LayerEntry(layer: .mandatory, target: .key(try Key("app.locked")), value: .integer(2), lockedFor: ["0"],
                           source: "/etc/propbus/mandatory.d/a.json"),
            ]))
            model.commitRound()
            service = Service(connection: serviceConnection!, model: model, store: store, history: history)
        }
    }

    override func tearDown() async throws {
        if let serviceConnection { _ = await onQueue(serviceConnection) { [self] in service = nil } }
        tearDownBus()
    }

    private func set(_ name: String, _ value: DBusValue) async throws {
        _ = try await client.call(destination: serviceConnection.uniqueName, path: Key.objectPath(ofGroup: "app"),
                                  interface: PropBusAPI.propertiesInterface, member: "Set",
                                  arguments: [.string(PropBusAPI.valuesInterface), .string(name), .variant(value)])
    }

    private func manager(_ member: String, _ arguments: [DBusValue]) async throws -> [DBusValue] {
        try await client.call(destination: serviceConnection.uniqueName, path: Key.rootPath, interface: PropBusAPI.managerInterface,
                              member: member, arguments: arguments)
    }

    private func listHistory(_ prefix: String, _ filter: [String: DBusValue] = [:]) async throws -> [DBusValue] {
        try await manager("ListHistory", [.string(prefix), .uint64(0), .uint32(0), .vardict(filter)])
    }

    private func record(_ key: String, revision: UInt64, old: Int32, new: Int32) throws -> HistoryRecord {
        HistoryRecord(change: revision, revision: revision, time: 1_000, key: try Key(key), kind: "changed", oldValue: .int32(old),
                      newValue: .int32(new), via: "Set", caller: WriteSet.Caller(via: "Set", busName: ":1.9", userID: 1000), transient: false)
    }

    func testARefusedSetIsHeldAsADeniedAttemptAndWrittenAfterTheRound() async throws {
        do {
            try await set("locked", .int32(5))
            XCTFail("a locked key was written")
        } catch let error as DBusError {
            XCTAssertEqual(error.name, PropBusError.Code.locked.dbusName, error.message)
        }
        // Barrier: the next round's end flushes whatever the refused round left held.
        try await set("marker", .int32(1))
        let (held, written) = await onQueue(serviceConnection) { [history] in (history.held, history.written) }
        XCTAssertEqual(held.count, 0)
        XCTAssertEqual(written.map(\.key), ["app.locked"])
        XCTAssertEqual(written.first?.caller.via, "Set")
        XCTAssertEqual(written.first?.error, PropBusError.Code.locked.dbusName)
        // And read back through the same port.
        let denied = try await listHistory("app.", ["denied": .variant(.boolean(true))])
        XCTAssertTrue("\(denied)".contains("app.locked"), "\(denied)")
    }

    func testAPortThatRecordsNoRefusalsIsNotGivenAny() async throws {
        await onQueue(serviceConnection) { [self] in service = nil }
        tearDownBus()
        let quiet = RecordingHistory()
        quiet.recordsDenied = false
        try await start(history: quiet)
        do { try await set("locked", .int32(5)) } catch is DBusError {}
        try await set("marker", .int32(1))
        let (held, written) = await onQueue(serviceConnection) { (quiet.held, quiet.written) }
        XCTAssertEqual(held.count + written.count, 0)
    }

    func testPruningRunsInStepsBetweenRoundsWhileThePortNeedsIt() async throws {
        await onQueue(serviceConnection) { [history] in history.pruningStepsLeft = 3 }
        try await set("volume", .int32(2))
        let done = await eventually(timeout: 10) {
            await onQueue(self.serviceConnection) { [history] in history.pruningStepsLeft == 0 }
        }
        XCTAssertTrue(done, "pruning did not run to its end")
        // One more round: nothing left to prune, no further step.
        try await set("marker", .int32(1))
        let steps = await onQueue(serviceConnection) { [history] in history.pruningSteps }
        XCTAssertEqual(steps, 3)
    }

    func testListHistoryAndRevertReadThroughThePort() async throws {
        // Revisions the model has reached (three keys created, one layer applied).
        let earlier = try record("app.volume", revision: 2, old: 1, new: 7)
        let later = try record("app.volume", revision: 3, old: 7, new: 1)
        await onQueue(serviceConnection) { [history] in history.records = [earlier, later] }
        let listed = try await listHistory("app.")
        guard case .array(_, let rows)? = listed.first else { return XCTFail("\(listed)") }
        XCTAssertEqual(rows.count, 2, "\(rows)")
        XCTAssertTrue("\(rows)".contains("app.volume"), "\(rows)")
        let reverted = try await manager("Revert", [.array(of: .string, [.string("app.volume")]), .uint64(2), .uint64(0), .boolean(false)])
        XCTAssertEqual(reverted, [.array(of: .string, [.string("app.volume")])])
        let (volume, asked) = try await onQueue(serviceConnection) { [self] () throws in
            (service!.model.entry(for: try Key("app.volume"))?.value, history.asked)
        }
        XCTAssertEqual(volume, .int32(7), "Revert wrote what the port said the key held at revision 2")
        XCTAssertEqual(asked, ["prefix app.", "key app.volume"])
    }

    func testWithoutAPortOrWithHistoryOffTheHistoryMethodsAreUnavailable() async throws {
        await onQueue(serviceConnection) { [history] in history.historyIsEnabled = false }
        try await assertUnavailable()
        await onQueue(serviceConnection) { [self] in service = nil }
        tearDownBus()
        try await start(history: nil)
        try await assertUnavailable()
    }

    private func assertUnavailable() async throws {
        let calls: [(String, [DBusValue])] = [
            ("ListHistory", [.string("app."), .uint64(0), .uint32(0), .vardict([:])]),
            ("Revert", [.array(of: .string, [.string("app.volume")]), .uint64(5), .uint64(0), .boolean(false)]),
            ("RevertRange", [.array(of: .string, []), .vardict(["since": .variant(.uint64(1))]), .boolean(false)]),
        ]
        for (member, arguments) in calls {
            do {
                _ = try await manager(member, arguments)
                XCTFail("\(member) answered without history")
            } catch let error as DBusError {
                XCTAssertEqual(error.name, PropBusError.Code.unavailable.dbusName, "\(member): \(error.message)")
                XCTAssertTrue(error.message.contains("keeps no history"), error.message)
            }
        }
    }

    private func tearDownBus() {
        serviceConnection?.close()
        client?.close()
        bus?.stop()
    }
}
