@testable import DBus
import Dispatch
import Etcd
import PropBus
@testable import PropBusFleet
@testable import PropBusService
import StoreTestSupport
import Synchronization
import XCTest

/// The fleet's shell (``Fleet``) in this process against a fake etcd port: a service on a
/// private bus, a store in memory, no etcd member. (The fleet's write throughput.)
final class FleetInProcessTests: FleetHostTestCase, @unchecked Sendable {
    private let store = RefusingStore()
    private static let keys = (1...4).map { "lab.k\($0)" }

    override func setUp() async throws {
        let store = store
        try await startHost(store: { store }) { model in
            for key in Self.keys { _ = try model.create(key: key, type: "i", defaultValue: .int32(0), options: ["scope": .string("fleet")]) }
        }
        let etcd = etcd
        // Connected, and this host's definitions offered to etcd.
        let layout = FleetLayout(prefix: "/lab/")
        let ready = await eventually(timeout: 10) {
            // The offers' revisions committed too: nothing of the start-up commits after this.
            let offered = await onQueue(self.serviceConnection) { [self] () -> Bool in
                guard let fleet = service?.fleet, fleet.state == .connected else { return false }
                return Self.keys.allSatisfy { (try? Key($0)).flatMap { fleet.revisions[$0]?.definition }.map { $0 > 0 } ?? false }
            }
            return offered && Self.keys.allSatisfy { (try? Key($0)).map { etcd.value(of: layout.definitionKey($0)) != nil } ?? false }
        }
        XCTAssertTrue(ready, "the fleet did not connect to the fake etcd")
    }

    private func set(_ key: String, _ value: DBusValue) async throws {
        let key = try Key(key)
        _ = try await client.call(destination: serviceConnection.uniqueName, path: key.objectPath, interface: PropBusAPI.propertiesInterface,
                                  member: "Set", arguments: [.string(PropBusAPI.valuesInterface), .string(key.name), .variant(value)])
    }

    /// Writes of independent keys from concurrent callers: as many txns with etcd at once as a
    /// host may have out, and the writes that came meanwhile all in the next one (etcd's cost
    /// is per txn, far more than per key); each caller answered, each key announced once.
    func testIndependentFleetWritesThatWaitedForATxnGoToEtcdInOne() async throws {
        let out = FleetMachine.maximumInFlight
        XCTAssertGreaterThan(Self.keys.count, out + 1, "too few keys to show it")
        let announced = Mutex<[String]>([])
        _ = await onQueue(serviceConnection) { [serviceConnection] in
            serviceConnection!.sendObserver = { message in
                guard message.member == "PropertiesChanged", let changed = try? message.arguments().dropFirst().first?.stringKeyedEntries else { return }
                announced.withLock { $0 += changed.keys }
            }
        }
        etcd.state.withLock { $0.txns = 0; $0.gate = out; $0.holdAnswers = true }
        let sets = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, key) in Self.keys.enumerated() { group.addTask { try await self.set(key, .int32(Int32(index + 10))) } }
                try await group.waitForAll()
            }
        }
        let waiting = await eventually {
            let queued = await onQueue(self.serviceConnection) { [self] in service?.fleet?.machine.queuedCount ?? 0 }
            return self.etcd.state.withLock { $0.inside } == out && queued == Self.keys.count - out
        }
        XCTAssertTrue(waiting, "\(out) txns with etcd and the other writes waiting")
        etcd.state.withLock { $0.holdAnswers = false; $0.gate = 0 }
        try await sets.value
        XCTAssertEqual(etcd.state.withLock { $0.txns }, out + 1, "txns for \(Self.keys.count) writes")
        for (index, key) in Self.keys.enumerated() {
            XCTAssertEqual(try storedValue(key), .int32(Int32(index + 10)))
            let value = try await get(key)
            XCTAssertEqual(value, .int32(Int32(index + 10)))
        }
        _ = await onQueue(serviceConnection) { [serviceConnection] in serviceConnection!.sendObserver = nil }
        let names = Self.keys.map { String($0.split(separator: ".").last!) }
        XCTAssertEqual(announced.withLock { $0 }.filter(names.contains).sorted(), names.sorted(), "each key announced once, its echo not again")
    }

    /// Writes of one key from concurrent callers go one after the other: the last reply's value
    /// is etcd's, and no write conflicted with this host's own.
    func testWritesOfOneKeyKeepTheHostsOrder() async throws {
        for value in Int32(1)...20 { try await set("lab.k1", .int32(value)) }
        XCTAssertEqual(try storedValue("lab.k1"), .int32(20))
    }

    /// The value etcd holds for `key` (with its writer's attribution, which history reads).
    private func storedValue(_ key: String) throws -> DBusValue? {
        try etcd.value(of: FleetLayout(prefix: "/lab/").valueKey(try Key(key))).map { bytes throws in try FleetLayout.decodeValue(bytes) }
    }

    private func get(_ key: String) async throws -> DBusValue {
        let key = try Key(key)
        let reply = try await client.call(destination: serviceConnection.uniqueName, path: key.objectPath, interface: PropBusAPI.propertiesInterface,
                                          member: "Get", arguments: [.string(PropBusAPI.valuesInterface), .string(key.name)])
        return reply.first?.unwrappingVariantOnce ?? .string("")
    }

    /// Concurrent writes of one key wait for each other instead of racing: one txn each, no
    /// compare lost to this host's own write.
    func testConcurrentWritesOfOneKeyNeverConflictWithEachOther() async throws {
        etcd.state.withLock { $0.txns = 0 }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for value in Int32(1)...8 { group.addTask { try await self.set("lab.k1", .int32(value)) } }
            try await group.waitForAll()
        }
        XCTAssertEqual(etcd.state.withLock { $0.txns }, 8, "a write retried after losing to this host's own")
    }

    /// etcd accepted the write, the store here could not commit it: the call fails (a reply
    /// only after the commit), and the watch's echo, held while the txn was out, brings the value.
    func testACommitThatFailsAfterEtcdAcceptedTheWriteFailsTheCallAndTheWatchBringsTheValue() async throws {
        _ = await onQueue(serviceConnection) { [store] in store.refuseNextChange = true }
        await assertThrowsStoreFailed { try await self.set("lab.k2", .int32(7)) }
        let arrived = await eventually { (try? await self.get("lab.k2")) == .int32(7) }
        XCTAssertTrue(arrived, "the value etcd holds did not reach the mirror")
    }

    /// etcd restored from a backup with the cluster's own name, token and URLs, and written past
    /// this host's revision before it asks again: only the member's raft term, lower than it
    /// showed before, tells. The host reads etcd in full and the write goes through.
    func testAMemberAnsweringAtALowerRaftTermIsNoticedAndTheWriteGoesThroughAfterTheFullRead() async throws {
        etcd.state.withLock { $0.raftTerm = 7 }
        try await set("lab.k1", .int32(1))
        etcd.state.withLock { state in
            state.kvs = [:]
            state.log = []
            state.revision += 50
            state.raftTerm = 2
        }
        try await set("lab.k1", .int32(2))
        let rewind = await lastRewind()
        XCTAssertEqual(rewind, .memberTermBelow(member: 0x1, etcd: 2, seen: 7))
        XCTAssertEqual(try storedValue("lab.k1"), .int32(2))
    }

    /// A watch cancelled with a compact revision below one etcd showed before: etcd's history
    /// started again (a restore, a wipe). Read in full as a rewind, not as a plain compaction.
    func testACompactRevisionBelowOneSeenBeforeIsARewind() async throws {
        let first = etcd.state.withLock { $0.watches.count }
        etcd.state.withLock { $0.watches.last?.deliver(.compacted(compactRevision: 30)) }
        let watchingAgain = await eventually { self.etcd.state.withLock { $0.watches.count } > first }
        XCTAssertTrue(watchingAgain, "no new watch after the compaction")
        let plainCompaction = await lastRewind()
        XCTAssertNil(plainCompaction, "a first compaction is no rewind")
        etcd.state.withLock { $0.watches.last?.deliver(.compacted(compactRevision: 5)) }
        let noticed = await eventually { await self.lastRewind() != nil }
        XCTAssertTrue(noticed, "the compact revision going back was not noticed")
        let rewind = await lastRewind()
        XCTAssertEqual(rewind, .compactionBelowSeen(etcd: 5, seen: 30))
    }

    /// A race: this host's own txn answered at revision N+1 while its watch
    /// (interrupted) stayed at N; etcd wiped and written back up to N by other hosts (their
    /// definitions offered again), so a watch created again at N shows nothing below the cursor.
    /// Its own answer did: etcd is read in full, the values it lacks dropped, and writes go through.
    func testAWipedEtcdWrittenBackUpToTheCursorIsNoticedByTheHostsOwnTxnAnswer() async throws {
        try await set("lab.k1", .int32(5))
        let cursor = try await wipeAfterAnUnseenOwnWrite(writtenBackTo: { $0 })
        etcd.state.withLock { $0.watches.last?.deliver(.created(endpoint: "fake", revision: cursor)) }
        try await assertReadAgainInFull(dropping: ["lab.k1", "lab.k2"])
        let rewind = await lastRewind()
        XCTAssertEqual(rewind, .revisionBelowMirror(etcd: cursor, mirror: cursor + 1))
    }

    /// The same, with etcd written back past this host's own answer: no revision tells, only
    /// etcd's counts, still different from the mirror's after the watch was started again at
    /// the cursor with nothing later to explain them.
    func testAWipedEtcdWrittenBackPastTheHostsOwnAnswerIsNoticedByItsCounts() async throws {
        try await set("lab.k1", .int32(5))
        let cursor = try await wipeAfterAnUnseenOwnWrite(writtenBackTo: { $0 + 1 })
        etcd.state.withLock { $0.watches.last?.deliver(.created(endpoint: "fake", revision: cursor + 1)) }
        let noticed = await eventually(timeout: 20) {
            await onQueue(self.serviceConnection) { [self] in
                if let fleet = service?.fleet, fleet.lastRewind == nil, fleet.state == .connected { fleet.checkWatch() }
                return service?.fleet?.lastRewind != nil
            }
        }
        XCTAssertTrue(noticed, "the mirror's counts, unlike etcd's, were not noticed")
        try await assertReadAgainInFull(dropping: ["lab.k1", "lab.k2"])
        let rewind = await lastRewind()
        XCTAssertEqual(rewind, .mirrorDisagrees(revision: cursor, definitions: Int64(Self.keys.count), values: 0,
                                                mirrorDefinitions: Int64(Self.keys.count), mirrorValues: 2))
    }

    /// Sets lab.k2 with the watch deaf (its echo never delivered: the cursor stays N, the answer
    /// is N+1), wipes etcd and writes it back, as another host would: the definitions, then
    /// writes outside the prefix up to `writtenBackTo(N)`. Returns N.
    private func wipeAfterAnUnseenOwnWrite(writtenBackTo target: (Int64) -> Int64) async throws -> Int64 {
        let cursor = await onQueue(serviceConnection) { [self] in service?.fleet?.cursor ?? 0 }
        let watches = etcd.state.withLock { state in defer { state.watches = [] }; return state.watches }
        try await set("lab.k2", .int32(6))
        XCTAssertEqual(etcd.state.withLock { $0.revision }, cursor + 1, "the own write's answer")
        let layout = FleetLayout(prefix: "/lab/")
        let definitions = try Self.keys.map { key in (layout.definitionKey(try Key(key)), etcd.value(of: layout.definitionKey(try Key(key)))!) }
        etcd.wipe()
        etcd.state.withLock { state in
            _ = FakeEtcd.execute(&state, [], definitions.map { .put($0.0, $0.1) }, [])
            while state.revision < target(cursor) { _ = FakeEtcd.execute(&state, [], [.put(Array("/other/pad".utf8), [1])], []) }
            state.watches = watches
        }
        let still = await onQueue(serviceConnection) { [self] in service?.fleet?.cursor ?? 0 }
        XCTAssertEqual(still, cursor, "the watch brought the own write back")
        return cursor
    }

    /// The host read etcd in full: `dropped` keys lost their values (etcd lacks them), FleetState
    /// went connecting and back to connected, and a write goes through.
    private func assertReadAgainInFull(dropping dropped: [String]) async throws {
        let back = await eventually(timeout: 10) {
            let connected = await onQueue(self.serviceConnection) { [self] in service?.fleet.map { $0.state == .connected && !$0.rewinding } ?? false }
            guard connected else { return false }
            for key in dropped where (try? await self.get(key)) != .int32(0) { return false }
            return true
        }
        XCTAssertTrue(back, "the values etcd lacks are still here, or FleetState is not connected")
        let rewind = await lastRewind()
        XCTAssertNotNil(rewind, "etcd going back in time was not noticed")
        try await set("lab.k2", .int32(7))
        XCTAssertEqual(try storedValue("lab.k2"), .int32(7))
    }

    private func lastRewind() async -> FleetRewind? {
        await onQueue(serviceConnection) { [self] in service?.fleet?.lastRewind }
    }

    /// Answers that come back while the D-Bus queue is busy are committed together, once,
    /// and only then answered (group commit), not one commit each; so are the writes of one txn.
    func testAnswersComingBackTogetherAreCommittedOnceBeforeTheirReplies() async throws {
        let running = await onQueue(serviceConnection) { [self] in service?.fleet?.arrivals }
        let arrivals = try XCTUnwrap(running)
        let keys = Self.keys, out = FleetMachine.maximumInFlight
        etcd.state.withLock { $0.gate = out; $0.holdAnswers = true }
        let sets = Task {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, key) in keys.enumerated() { group.addTask { try await self.set(key, .int32(Int32(index + 20))) } }
                try await group.waitForAll()
            }
        }
        let allWithEtcd = await eventually {
            let queued = await onQueue(self.serviceConnection) { [self] in service?.fleet?.machine.queuedCount ?? 0 }
            return self.etcd.state.withLock { $0.inside } == out && queued == keys.count - out
        }
        XCTAssertTrue(allWithEtcd, "the txns were not with etcd together, the other writes waiting")
        // The D-Bus queue busy (a long round, say) while every answer comes back.
        let busy = DispatchSemaphore(value: 0)
        let entered = Mutex(false)
        serviceConnection.queue.async { entered.withLock { $0 = true }; busy.wait() }
        let blocked = await eventually { entered.withLock { $0 } }
        XCTAssertTrue(blocked)
        let before = store.changeCommits
        etcd.state.withLock { $0.holdAnswers = false; $0.gate = 0 }
        // Read off the D-Bus queue, which the test keeps busy.
        let back = await eventually { arrivals.waiting == out }
        XCTAssertTrue(back, "the answers did not come back")
        busy.signal()
        try await sets.value
        let commits = await onQueue(serviceConnection) { [store] in store.changeCommits } - before
        XCTAssertEqual(commits, 2, "commits: one for the \(out) answers that came back together, one for the txn of the \(keys.count - out) writes that waited")
        for (index, key) in keys.enumerated() {
            let value = try await get(key)
            XCTAssertEqual(value, .int32(Int32(index + 20)))
        }
    }

    /// Another host's change of a fleet key is announced before this host commits it: etcd
    /// holds it durably, and a crash before the commit replays it from the cursor committed
    /// with it. The PropertiesChanged leaves before the store's commit starts.
    func testAnotherHostsChangeIsAnnouncedBeforeItIsCommittedHere() async throws {
        let key = try Key("lab.k3")
        let announced = Mutex(false), announcedAtCommit = Mutex<[Bool]>([])
        _ = await onQueue(serviceConnection) { [serviceConnection, store] in
            serviceConnection!.sendObserver = { message in
                if message.member == "PropertiesChanged", message.path == key.objectPath { announced.withLock { $0 = true } }
            }
            store.beforeChangeCommit = { announcedAtCommit.withLock { $0.append(announced.withLock { $0 }) } }
        }
        // Another host's write, straight to etcd; the watch brings it.
        let layout = FleetLayout(prefix: "/lab/")
        _ = try etcd.txn(compares: [], success: [.put(layout.valueKey(key), FleetLayout.encodeValue(.int32(5)))], failure: [],
                         resendIfConnectionLost: false, timeout: nil)
        let committed = await eventually { !announcedAtCommit.withLock { $0 }.isEmpty }
        XCTAssertTrue(committed, "the change was not committed here")
        XCTAssertEqual(announcedAtCommit.withLock { $0.first }, true, "committed before it was announced")
        _ = await onQueue(serviceConnection) { [serviceConnection, store] in
            serviceConnection!.sendObserver = nil
            store.beforeChangeCommit = nil
        }
        let value = try await get("lab.k3")
        XCTAssertEqual(value, .int32(5))
    }

    private func assertThrowsStoreFailed(_ body: () async throws -> Void) async {
        do {
            try await body()
            XCTFail("the write was answered although its commit failed")
        } catch let error as DBusError {
            XCTAssertEqual(error.name, PropBusAPI.errorPrefix + "StoreFailed", error.message)
        } catch {
            XCTFail("\(error)")
        }
    }
}
