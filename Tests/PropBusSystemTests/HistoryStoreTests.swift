import DBusValues
import Foundation
import XCTest

@testable import PropBus
@testable import PropBusSystem

/// The round's WriteSet and its first consumer: the store's history, written with the values.
final class HistoryStoreTests: XCTestCase {
    private var directory: URL!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("propbus-history-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: directory)
    }

    private var path: String { directory.appendingPathComponent(SQLiteStore.fileName).path }
    private let alice = WriteSet.Caller(via: "Apply", busName: ":1.42", userID: 1000, userName: "alice", processID: 4242, command: "propctl")

    private func end(_ model: PropertyModel, _ store: PropertyStore) {
        XCTAssertNil(Round(model: model, commands: nil, store: store).end())
    }

    func testOneApplyIsOneChangeOfSeveralKeysWithItsCaller() throws {
        let store = try SQLiteStore(path: path)
        let model = try PropertyModel(store: store)
        _ = try model.create(key: "settings.volume", type: "i", defaultValue: .int32(50), options: [:])
        _ = try model.create(key: "settings.muted", type: "b", defaultValue: .boolean(false), options: [:])
        end(model, store)
        model.origin = .call(alice)
        _ = try model.apply(set: [("settings.volume", .int32(40)), ("settings.muted", .boolean(true))], reset: [])
        model.origin = .daemon
        end(model, store)

        let records = try store.history.records(prefix: "settings.", after: 0, limit: 100).filter { $0.via == "Apply" }
        XCTAssertEqual(records.map(\.key.text).sorted(), ["settings.muted", "settings.volume"])
        XCTAssertEqual(Set(records.map(\.change)).count, 1, "one Apply is one change")
        let volume = try XCTUnwrap(records.first { $0.key.text == "settings.volume" })
        XCTAssertEqual(volume.oldValue, .int32(50))
        XCTAssertEqual(volume.newValue, .int32(40))
        XCTAssertEqual(volume.kind, "changed")
        XCTAssertEqual(volume.caller, alice)
        XCTAssertEqual(volume.revision, model.entry(for: try Key("settings.volume"))?.revision)
        let created = try store.history.records(prefix: "settings.volume", after: 0, limit: 100).first
        XCTAssertEqual(created?.kind, "created")
        XCTAssertEqual(created?.via, "startup", "what comes before the first commit is the start-up's")
    }

    func testHistorySurvivesReopeningAndARolledBackRoundLeavesNone() throws {
        do {
            let store = try SQLiteStore(path: path)
            let model = try PropertyModel(store: store)
            _ = try model.create(key: "a.x", type: "i", defaultValue: .int32(0), options: [:])
            end(model, store)
            model.origin = .call(alice)
            _ = try model.set("a.x", to: .int32(1))
            end(model, store)
            // A round the store never commits: neither its value nor its history row remains.
            _ = try model.set("a.x", to: .int32(2))
            Round(model: model, commands: nil, store: store).rollback(because: PropBusError(.storeFailed, "test"))
        }
        let store = try SQLiteStore(path: path)
        let model = try PropertyModel(store: store)
        XCTAssertEqual(model.entry(for: try Key("a.x"))?.value, .int32(1))
        let records = try store.history.records(prefix: "a.x", after: 0, limit: 100)
        XCTAssertEqual(records.map(\.newValue), [.int32(0), .int32(1)])
        XCTAssertEqual(records.last?.caller?.userName, "alice")
    }

    func testTransientKeysHistoryStaysInMemoryBounded() throws {
        let store = try SQLiteStore(path: path)
        store.history.options.maximumTransientRows = 3
        let model = try PropertyModel(store: store)
        _ = try model.create(key: "t.x", type: "i", defaultValue: .int32(0), options: ["persistent": .boolean(false)])
        end(model, store)
        for value in 1...5 {
            _ = try model.set("t.x", to: .int32(Int32(value)))
            end(model, store)
        }
        let records = try store.history.records(prefix: "t.", after: 0, limit: 100)
        XCTAssertEqual(records.map(\.newValue), [.int32(3), .int32(4), .int32(5)])
        XCTAssertTrue(records.allSatisfy(\.transient))
        XCTAssertEqual(try SQLiteStore(path: path).history.records(prefix: "t.", after: 0, limit: 100).count, 0, "never on disk")
    }

    func testRowsArePrunedInSmallStepsOfTheirOwnAndNoHistoryRecordsNothing() throws {
        let store = try SQLiteStore(path: path)
        store.history.options.maximumRows = 4
        store.history.options.pruneBatch = 2
        let model = try PropertyModel(store: store)
        _ = try model.create(key: "p.x", type: "i", defaultValue: .int32(0), options: [:])
        end(model, store)
        for value in 1...10 {
            _ = try model.set("p.x", to: .int32(Int32(value)))
            end(model, store)
        }
        // A commit deletes nothing; pruning steps of their own do, a batch each.
        XCTAssertEqual(try store.history.records(prefix: "p.", after: 0, limit: 100).count, 11)
        XCTAssertTrue(store.history.historyNeedsPruning)
        var steps = 0
        while try store.history.pruneHistory() { steps += 1 }
        XCTAssertEqual(steps, 3, "7 rows past the bound, 2 a step: 4 steps, the last with nothing after it")
        XCTAssertFalse(store.history.historyNeedsPruning)
        XCTAssertEqual(try store.history.records(prefix: "p.", after: 0, limit: 100).map(\.newValue), [.int32(7), .int32(8), .int32(9), .int32(10)])
        store.history.options.isEnabled = false
        _ = try model.set("p.x", to: .int32(11))
        end(model, store)
        XCTAssertEqual(try store.history.records(prefix: "p.", after: 0, limit: 100).count, 4)
    }

    // MARK: Write cost

    /// WAL frames one commit added: the WAL is emptied first (another connection's TRUNCATE
    /// checkpoint), so its size after the commit is its header and that commit's frames.
    private func framesOfOneCommit(_ model: PropertyModel, _ store: PropertyStore, path: String, round: Int) throws -> Int {
        while (store as? SQLiteStore)?.history.historyNeedsPruning == true, try (store as? SQLiteStore)?.history.pruneHistory() == true {}
        try SQLiteDatabase(path: path).execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for writer in 0..<16 { _ = try model.set("bench.w\(writer)", to: .int32(Int32(round * 16 + writer))) }
        end(model, store)
        var info = stat()
        XCTAssertEqual(stat(path + "-wal", &info), 0)
        let pageSize = Int(try SQLiteDatabase(path: path).textRows("PRAGMA page_size").first ?? "4096") ?? 4096
        return (Int(info.st_size) - 32) / (pageSize + 24)
    }

    /// Sixteen writers' group commit (one round setting 16 keys, each with a long history
    /// already) writes about the pages it writes with `--no-history`: recording history must
    /// not add a page per key (the `(key, revision)` index has an insertion point per key), only
    /// the few its rows take: their leaf, and when it fills a new one, its parent, the free
    /// list's trunk and the database header (25 pages against 1 when commits indexed them).
    func testAGroupCommitOf16KeysWritesAboutThePagesItWritesWithoutHistory() throws {
        var frames: [Bool: Int] = [:]
        for enabled in [true, false] {
            let path = directory.appendingPathComponent("history-\(enabled).db").path
            let store = try SQLiteStore(path: path)
            store.history.options.isEnabled = enabled
            let model = try PropertyModel(store: store)
            for writer in 0..<16 { _ = try model.create(key: "bench.w\(writer)", type: "i", defaultValue: .int32(0), options: [:]) }
            end(model, store)
            model.origin = .call(WriteSet.Caller(
                via: "Set", busName: ":1.4242", userID: 1000, userName: "alice", processID: 4242, command: "write-client",
                executable: "/usr/local/src/propbus/bench/build/write-client", unit: "user@1000.service"))
            // Long enough that each key's index entries span pages of their own.
            for round in 0..<400 {
                for writer in 0..<16 { _ = try model.set("bench.w\(writer)", to: .int32(Int32(round * 16 + writer))) }
                end(model, store)
                // As the daemon does between rounds.
                while store.history.historyNeedsPruning, try store.history.pruneHistory() {}
            }
            frames[enabled] = try (0..<4).map { try framesOfOneCommit(model, store, path: path, round: 1000 + $0) }.max()
            if enabled {
                XCTAssertEqual(try store.history.records(prefix: "bench.w3", after: 0, limit: 10_000).count, 1 + 400 + 4, "every change recorded")
            }
        }
        let on = try XCTUnwrap(frames[true]), off = try XCTUnwrap(frames[false])
        XCTAssertLessThanOrEqual(on, off + 6, "a 16-key commit wrote \(on) WAL pages with history, \(off) without")
    }

    /// Schema 7 → 8: a store an earlier propbusd wrote (history in `history` only, no
    /// `history_recent`) opens with its rows kept, readable, and new rows after them.
    func testVersion7StoreIsMigratedKeepingItsHistory() throws {
        do {
            let store = try SQLiteStore(path: path)
            let model = try PropertyModel(store: store)
            _ = try model.create(key: "m.x", type: "i", defaultValue: .int32(0), options: [:])
            end(model, store)
            model.origin = .call(alice)
            _ = try model.set("m.x", to: .int32(1))
            end(model, store)
            while try store.history.pruneHistory() {}
        }
        try downgradeToVersion8()
        do {
            // What schema 7 was: every row in `history`.
            let database = try SQLiteDatabase(path: path)
            try database.execute("INSERT INTO history SELECT * FROM history_recent")
            try database.execute("DROP TABLE history_recent")
            try database.execute("PRAGMA user_version = 7")
        }
        let store = try SQLiteStore(path: path)
        XCTAssertEqual(try SQLiteDatabase(path: path).textRows("PRAGMA user_version"), ["\(SQLiteStore.schemaVersion)"])
        let model = try PropertyModel(store: store)
        model.origin = .call(alice)
        _ = try model.set("m.x", to: .int32(2))
        end(model, store)
        let records = try store.history.records(prefix: "m.x", after: 0, limit: 100)
        XCTAssertEqual(records.map(\.newValue), [.int32(0), .int32(1), .int32(2)])
        XCTAssertEqual(records.map(\.caller?.userName), [nil, "alice", "alice"])
        XCTAssertEqual(try store.history.history(ofChange: records[1].change).map(\.newValue), [.int32(1)])
        XCTAssertEqual(try store.history.history(of: try Key("m.x"), atOrBefore: records[1].revision).then?.newValue, .int32(1))
    }

    /// Rows are written once, into `history`; a step between rounds adds a batch's entries to
    /// the index tables. Every query reads the indexed rows and the tail, and indexing changes
    /// no answer.
    func testRowsAreIndexedInBatchesBetweenRoundsAndQueriesReadTheTailToo() throws {
        let store = try SQLiteStore(path: path)
        store.history.options.indexBatch = 4
        let model = try PropertyModel(store: store)
        _ = try model.create(key: "r.x", type: "i", defaultValue: .int32(0), options: [:])
        _ = try model.create(key: "r.y", type: "i", defaultValue: .int32(0), options: [:])
        end(model, store)
        var changes: [UInt64] = []
        for value in 1...9 {
            model.origin = .call(alice)
            _ = try model.apply(set: [("r.x", .int32(Int32(value))), ("r.y", .int32(Int32(-value)))], reset: [])
            end(model, store)
            changes.append(try XCTUnwrap(store.history.history(of: try Key("r.x"), atOrBefore: .max).latest?.change))
            if value == 5 {
                // 12 rows, past the batch of 4: one step indexes them all.
                XCTAssertTrue(store.history.historyNeedsPruning)
                var steps = 1
                while try store.history.pruneHistory() { steps += 1 }
                XCTAssertEqual(steps, 1)
                XCTAssertFalse(store.history.historyNeedsPruning)
            }
        }
        let database = try SQLiteDatabase(path: path)
        XCTAssertEqual(try database.textRows("SELECT count(*) FROM history"), ["20"])
        XCTAssertEqual(try database.textRows("SELECT sum(count) FROM history_index"), ["12"])
        XCTAssertEqual(try database.textRows("SELECT count(*) FROM history_index"), ["2"], "one entry per key per batch")
        XCTAssertEqual(try database.textRows("SELECT count(*) FROM history_by_change"), ["0"], "no deletion")
        let all = try store.history.records(prefix: "r.", after: 0, limit: 100)
        XCTAssertEqual(all.filter { $0.key.text == "r.x" }.map(\.newValue), (0...9).map { .int32(Int32($0)) })
        XCTAssertEqual(all.map(\.revision), all.map(\.revision).sorted(), "oldest first, indexed rows and tail")
        XCTAssertEqual(try store.history.records(prefix: "r.", after: 0, limit: 3).count, 3)
        for (index, change) in changes.enumerated() {
            XCTAssertEqual(try store.history.history(ofChange: change).sorted { $0.key < $1.key }.map(\.newValue),
                           [.int32(Int32(index + 1)), .int32(Int32(-index - 1))])
        }
        XCTAssertEqual(try store.history.history(of: try Key("r.y"), atOrBefore: .max).latest?.newValue, .int32(-9))
        XCTAssertEqual(try store.history.history(of: try Key("r.y"), atOrBefore: all[3].revision).then?.newValue, .int32(-1))
        let before = all.map(\.revision)
        while store.history.historyNeedsPruning, try store.history.pruneHistory() {}
        XCTAssertEqual(try store.history.records(prefix: "r.", after: 0, limit: 100).map(\.revision), before)
        XCTAssertEqual(try database.textRows("SELECT sum(count) FROM history_index"), ["20"])
        // Pruned rows take their index entries with them.
        store.history.options.maximumRows = 6
        while try store.history.pruneHistory() {}
        XCTAssertEqual(try database.textRows("SELECT sum(count) FROM history_index"), ["6"])
        XCTAssertEqual(try store.history.records(prefix: "r.", after: 0, limit: 100).map(\.revision), Array(before.suffix(6)))
    }

    /// A change's rows are found by a binary search over the rows (the commit holding it) and,
    /// for deletions (whose change is the key's old revision), their index; indexed or in the
    /// tail, one key's change or several keys', alone in its commit or not.
    func testAChangeIsFoundByABinarySearchAndDeletionsByTheirIndex() throws {
        let store = try SQLiteStore(path: path)
        store.history.options.indexBatch = 1_000
        let model = try PropertyModel(store: store)
        var expected: [(change: UInt64, keys: [String])] = []
        func round(_ body: () throws -> Void) throws {
            try body()
            end(model, store)
        }
        try round {
            for name in ["a", "b", "c", "d"] { _ = try model.create(key: "d.\(name)", type: "i", defaultValue: .int32(0), options: [:]) }
        }
        for value in 1...3 {
            // Two changes in one commit: an Apply of two keys, then a Set of a third.
            try round {
                model.origin = .call(alice)
                _ = try model.apply(set: [("d.a", .int32(Int32(value))), ("d.b", .int32(Int32(value)))], reset: [])
                model.origin = .call(bob)
                _ = try model.set("d.c", to: .int32(Int32(value)))
            }
        }
        try round { _ = try model.delete(key: "d.d") }
        try round {
            model.origin = .call(alice)
            _ = try model.set("d.a", to: .int32(9))
        }
        let rows = try store.history.records(prefix: "d.", after: 0, limit: 100)
        for change in Set(rows.map(\.change)) {
            expected.append((change, rows.filter { $0.change == change }.map(\.key.text).sorted()))
        }
        XCTAssertTrue(rows.contains { $0.kind == "deleted" && $0.change < $0.revision }, "a deletion's change is below its row's revision")
        for indexed in [false, true] {
            if indexed {
                store.history.options.indexBatch = 1
                while try store.history.pruneHistory() {}
                XCTAssertEqual(try SQLiteDatabase(path: path).textRows("SELECT count(*) FROM history WHERE id > (SELECT value FROM meta WHERE name = 'history_indexed')"), ["0"])
            }
            for (change, keys) in expected {
                XCTAssertEqual(try store.history.history(ofChange: change).map(\.key.text).sorted(), keys, "change \(change), indexed: \(indexed)")
            }
            XCTAssertEqual(try store.history.history(ofChange: 999_999).count, 0)
        }
    }

    /// A step reads the tail for deletions' rows only when one may be there (the rows written
    /// since the last step say so; at open it is not known): a deletion in a later batch than
    /// one without any, and one left in the tail by a closed store, are still found by change,
    /// and the batches of plain writes around them index no row in `history_by_change`.
    func testADeletionIsIndexedByChangeInALaterBatchAndAfterReopening() throws {
        var store = try SQLiteStore(path: path)
        store.history.options.indexBatch = 2
        var model = try PropertyModel(store: store)
        func round(_ body: () throws -> Void) throws {
            try body()
            end(model, store)
            while try store.history.pruneHistory() {}
        }
        func byChange() throws -> [String] { try SQLiteDatabase(path: path).textRows("SELECT count(*) FROM history_by_change") }
        try round { for name in ["a", "b", "c"] { _ = try model.create(key: "x.\(name)", type: "i", defaultValue: .int32(0), options: [:]) } }
        for value in 1...4 { try round { _ = try model.set("x.a", to: .int32(Int32(value))) } }
        XCTAssertEqual(try byChange(), ["0"], "no deletion yet")
        // A deletion in a batch after ones without: indexed at that batch's step.
        try round { _ = try model.delete(key: "x.b") }
        try round { _ = try model.set("x.a", to: .int32(5)) }
        XCTAssertEqual(try byChange(), ["1"])
        // A deletion's change is the key's old revision: the change's rows are all that name it.
        func expectFound(_ deletion: HistoryRecord, among rows: [HistoryRecord]) throws {
            let found = try store.history.history(ofChange: deletion.change)
            XCTAssertEqual(found.map(\.key.text).sorted(), rows.filter { $0.change == deletion.change }.map(\.key.text).sorted())
            XCTAssertTrue(found.contains { $0.kind == "deleted" && $0.key == deletion.key }, "\(deletion.key.text)'s deletion")
        }
        var rows = try store.history.records(prefix: "x.", after: 0, limit: 100)
        var deletions = rows.filter { $0.kind == "deleted" }
        XCTAssertEqual(deletions.count, 1)
        try expectFound(deletions[0], among: rows)
        for value in 6...9 { try round { _ = try model.set("x.a", to: .int32(Int32(value))) } }
        XCTAssertEqual(try byChange(), ["1"])
        // A deletion left in the tail by a store closed before its step: indexed after reopening.
        store.history.options.indexBatch = 1_000
        try round { _ = try model.delete(key: "x.c") }
        store.close()
        store = try SQLiteStore(path: path)
        store.history.options.indexBatch = 1
        model = try PropertyModel(store: store)
        while try store.history.pruneHistory() {}
        XCTAssertEqual(try SQLiteDatabase(path: path).textRows("SELECT count(*) FROM history WHERE id > (SELECT value FROM meta WHERE name = 'history_indexed')"), ["0"])
        XCTAssertEqual(try byChange(), ["2"])
        rows = try store.history.records(prefix: "x.", after: 0, limit: 100)
        deletions = rows.filter { $0.kind == "deleted" }
        XCTAssertEqual(deletions.map(\.key.text), ["x.b", "x.c"])
        for deletion in deletions { try expectFound(deletion, among: rows) }
    }

    /// A time is found by a binary search over the rows (their times never decrease): the
    /// revision before each row's time is the previous row's, also across indexed rows and the
    /// tail, and a time before every row or after the last has none or the last.
    func testATimeIsFoundByABinarySearchOverTheRows() throws {
        let store = try SQLiteStore(path: path)
        store.history.options.indexBatch = 5
        let model = try PropertyModel(store: store)
        _ = try model.create(key: "t.x", type: "i", defaultValue: .int32(0), options: [:])
        end(model, store)
        for value in 1...12 {
            model.origin = .call(alice)
            _ = try model.set("t.x", to: .int32(Int32(value)))
            end(model, store)
            while store.history.historyNeedsPruning, try store.history.pruneHistory() {}
        }
        let rows = try store.history.records(prefix: "t.x", after: 0, limit: 100)
        XCTAssertEqual(rows.count, 13)
        XCTAssertEqual(rows.map(\.time), rows.map(\.time).sorted(), "times never decrease")
        XCTAssertEqual(try store.history.historyRevision(before: rows[0].time), 0)
        for index in 1..<rows.count where rows[index].time > rows[index - 1].time {
            XCTAssertEqual(try store.history.historyRevision(before: rows[index].time), rows[index - 1].revision, "row \(index)")
        }
        XCTAssertEqual(try store.history.historyRevision(before: .max), rows.last?.revision)
        // Gaps in the ids (pruned rows) change nothing.
        store.history.options.maximumRows = 7
        while try store.history.pruneHistory() {}
        let kept = try store.history.records(prefix: "t.x", after: 0, limit: 100)
        XCTAssertEqual(kept.count, 7)
        XCTAssertEqual(try store.history.historyRevision(before: kept[3].time), kept[2].revision)
        XCTAssertEqual(try store.history.historyRevision(before: kept[0].time), 0)
    }

    // MARK: Callers in a table of their own

    private let bob = WriteSet.Caller(via: "Set", busName: ":1.43", userID: 1001, userName: "bob", processID: 4343, command: "propctl",
                                      executable: "/usr/bin/propctl", unit: "user@1001.service")

    /// Rows name their caller by an id into `history_caller`, one row per caller identity
    /// (the same identity found again after reopening); pruning deletes the callers no row
    /// references any more.
    func testCallersAreKeptInATableOfTheirOwnAndPrunedWhenNoRowReferencesThem() throws {
        do {
            let store = try SQLiteStore(path: path)
            // Each row raises its caller's `last_row` to itself: a sweep keeps no caller longer
            // than its last row.
            store.history.identities.callerLease = 1
            let model = try PropertyModel(store: store)
            _ = try model.create(key: "c.x", type: "i", defaultValue: .int32(0), options: [:])
            _ = try model.create(key: "c.gone", type: "i", defaultValue: .int32(0), options: [:])
            end(model, store)
            for value in 1...3 {
                model.origin = .call(alice)
                _ = try model.set("c.x", to: .int32(Int32(value)))
                end(model, store)
            }
            model.origin = .call(bob)
            _ = try model.set("c.x", to: .int32(4))
            end(model, store)
        }
        let store = try SQLiteStore(path: path)
        store.history.identities.callerLease = 1
        let model = try PropertyModel(store: store)
        model.origin = .call(alice)
        _ = try model.set("c.x", to: .int32(5))
        end(model, store)
        let database = try SQLiteDatabase(path: path)
        XCTAssertEqual(try database.textRows("SELECT count(*) FROM history_caller"), ["2"], "alice once (also after reopening), bob once")
        XCTAssertEqual(try database.textRows("SELECT count(DISTINCT caller) FROM history"), ["2"])
        let records = try store.history.records(prefix: "c.x", after: 0, limit: 100)
        XCTAssertEqual(records.map(\.caller?.userName), [nil, "alice", "alice", "alice", "bob", "alice"])
        var expectedBob = bob
        expectedBob.via = "Set"
        XCTAssertEqual(records[4].caller, expectedBob, "every field of the caller comes back")
        // Bob's only row goes: so does his caller row; and c.gone's only row, and its key row
        // (swept once the rows are indexed).
        store.history.options.maximumRows = 1
        store.history.options.indexBatch = 1
        while try store.history.pruneHistory() {}
        XCTAssertEqual(try store.history.records(prefix: "c.x", after: 0, limit: 100).map(\.caller?.userName), ["alice"])
        XCTAssertEqual(try database.textRows("SELECT user FROM history_caller"), ["alice"])
        XCTAssertEqual(try database.textRows("SELECT key FROM history_key"), ["c.x"], "keys are swept as callers are")
        XCTAssertEqual(try database.textRows("SELECT sum(count) FROM history_index"), ["1"])
    }

    /// The caches in front of the key and caller tables (``HistoryIdentities/keySlots``,
    /// ``HistoryIdentities/callerSlots``): keys and callers that land in the same slot (callers of
    /// one bus name, keys found to collide) are compared in full, never taken for another's.
    func testKeysAndCallersSharingACacheSlotNeverShareAnID() throws {
        let store = try SQLiteStore(path: path)
        // Three keys in one slot of the key cache.
        let slots = store.history.identities.keySlots.count
        var bySlot: [Int: [String]] = [:]
        var colliding: [String] = []
        for index in 0..<100_000 where colliding.isEmpty {
            let key = "s.k\(index)"
            bySlot[HistoryIdentities.slot(of: key, among: slots), default: []].append(key)
            if let keys = bySlot[HistoryIdentities.slot(of: key, among: slots)], keys.count == 3 { colliding = keys }
        }
        XCTAssertEqual(Set(colliding.map { HistoryIdentities.slot(of: $0, among: slots) }).count, 1)
        let (sa, sb, ta) = (colliding[0], colliding[1], colliding[2])
        let model = try PropertyModel(store: store)
        for key in colliding { _ = try model.create(key: key, type: "i", defaultValue: .int32(0), options: [:]) }
        end(model, store)
        // Alice's bus name, another uid and user: a later connection given a freed name.
        let mallory = WriteSet.Caller(via: "Set", busName: alice.busName, userID: 1002, userName: "mallory", processID: 4444, command: "propctl")
        let writes: [(key: String, caller: WriteSet.Caller)] = [(sa, alice), (sb, mallory), (ta, alice), (sa, mallory), (sb, alice)]
        for round in 1...2 {
            for (index, write) in writes.enumerated() {
                model.origin = .call(write.caller)
                _ = try model.set(write.key, to: .int32(Int32(round * 10 + index)))
                end(model, store)
            }
        }
        // A key recreated with another type, written by each in one round.
        _ = try model.delete(key: sb)
        end(model, store)
        _ = try model.create(key: sb, type: "s", defaultValue: .string(""), options: [:])
        end(model, store)
        model.origin = .call(mallory)
        _ = try model.set(sb, to: .string("x"))
        model.origin = .call(alice)
        _ = try model.set(ta, to: .int32(99))
        model.origin = .daemon
        end(model, store)

        for key in colliding {
            var expected: [(user: String?, value: DBusValue?)] = []
            for round in 1...2 {
                for (index, write) in writes.enumerated() where write.key == key {
                    expected.append((write.caller.userName, .int32(Int32(round * 10 + index))))
                }
            }
            if key == sb { expected += [(nil, nil), (nil, .string("")), ("mallory", .string("x"))] }
            if key == ta { expected.append(("alice", .int32(99))) }
            let records = try store.history.records(prefix: key, after: 0, limit: 100).filter { $0.key.text == key }.dropFirst()
            XCTAssertEqual(records.map(\.caller?.userName), expected.map(\.user), key)
            XCTAssertEqual(records.map(\.newValue), expected.map(\.value), key)
            for record in records where record.caller != nil {
                XCTAssertEqual(record.caller?.userID, record.caller?.userName == "alice" ? 1000 : 1002, "\(key): a caller's uid is its own")
            }
        }
        let database = try SQLiteDatabase(path: path)
        XCTAssertEqual(try database.textRows("SELECT count(*) FROM history_key"), ["3"], "one id per key, kept when it is recreated")
        XCTAssertEqual(try database.textRows("SELECT count(*) FROM history_caller WHERE bus_name = ':1.42'"), ["2"], "alice and mallory, once each")
    }

    /// Schema 8 → 9: a store whose rows repeat their caller's fields opens with its rows kept
    /// (in both tables), their callers moved into `history_caller` once per identity.
    func testVersion8StoreIsMigratedKeepingItsHistoryAndCallers() throws {
        do {
            let store = try SQLiteStore(path: path)
            let model = try PropertyModel(store: store)
            _ = try model.create(key: "m.x", type: "i", defaultValue: .int32(0), options: [:])
            end(model, store)
            for (value, caller) in [(1, alice), (2, bob), (3, alice)] {
                model.origin = .call(caller)
                _ = try model.set("m.x", to: .int32(Int32(value)))
                end(model, store)
            }
        }
        try downgradeToVersion8()
        let store = try SQLiteStore(path: path)
        let database = try SQLiteDatabase(path: path)
        XCTAssertEqual(try database.textRows("PRAGMA user_version"), ["\(SQLiteStore.schemaVersion)"])
        XCTAssertEqual(try database.textRows("SELECT count(*) FROM history_caller"), ["2"])
        let records = try writeAsBobAndReadMX(store, database)
        XCTAssertEqual(records[2].caller?.executable, "/usr/bin/propctl")
        XCTAssertEqual(records[2].caller?.unit, "user@1001.service")
        XCTAssertEqual(try store.history.history(ofChange: records[2].change).map(\.caller?.busName), [":1.43"])
        XCTAssertEqual(try store.history.history(of: try Key("m.x"), atOrBefore: records[1].revision).then?.caller?.processID, 4242)
    }

    /// Schema 9 → 10: a store whose rows name their key as text, split between `history` and
    /// `history_recent`, opens with its rows kept (ids, callers), their keys as ids in
    /// `history_key`, all of them indexed, and new rows after them.
    func testVersion9StoreIsMigratedKeepingItsRowsAndIndexingThem() throws {
        do {
            let store = try SQLiteStore(path: path)
            let model = try PropertyModel(store: store)
            _ = try model.create(key: "m.x", type: "i", defaultValue: .int32(0), options: [:])
            _ = try model.create(key: "m.y", type: "i", defaultValue: .int32(0), options: [:])
            end(model, store)
            for (value, caller) in [(1, alice), (2, bob), (3, alice)] {
                model.origin = .call(caller)
                _ = try model.apply(set: [("m.x", .int32(Int32(value))), ("m.y", .int32(Int32(-value)))], reset: [])
                end(model, store)
            }
        }
        try downgradeToVersion9()
        XCTAssertEqual(try SQLiteDatabase(path: path).textRows("SELECT (SELECT count(*) FROM history) + (SELECT count(*) FROM history_recent)"), ["8"])
        let store = try SQLiteStore(path: path)
        let database = try SQLiteDatabase(path: path)
        XCTAssertEqual(try database.textRows("PRAGMA user_version"), ["\(SQLiteStore.schemaVersion)"])
        XCTAssertEqual(try database.textRows("SELECT key FROM history_key ORDER BY key"), ["m.x", "m.y"])
        XCTAssertEqual(try database.textRows("SELECT sum(count) FROM history_index"), ["8"], "every migrated row indexed")
        XCTAssertEqual(try database.textRows("SELECT count(*) FROM history_caller"), ["2"])
        let records = try writeAsBobAndReadMX(store, database)
        XCTAssertEqual(try store.history.history(ofChange: records[2].change).sorted { $0.key < $1.key }.map(\.newValue), [.int32(2), .int32(-2)])
        XCTAssertEqual(try store.history.history(of: try Key("m.y"), atOrBefore: records[1].change).then?.newValue, .int32(-1))
        XCTAssertEqual(try store.history.records(prefix: "m.", after: 0, limit: 100).count, 9)
    }

    /// After a migration of m.x's rows (0, then 1, 2, 3 by alice, bob, alice): bob's write of 4
    /// finds his migrated caller, and every row reads back with its caller.
    private func writeAsBobAndReadMX(_ store: SQLiteStore, _ database: SQLiteDatabase) throws -> [HistoryRecord] {
        let model = try PropertyModel(store: store)
        model.origin = .call(bob)
        _ = try model.set("m.x", to: .int32(4))
        end(model, store)
        XCTAssertEqual(try database.textRows("SELECT count(*) FROM history_caller"), ["2"], "bob's identity found among the migrated ones")
        let records = try store.history.records(prefix: "m.x", after: 0, limit: 100)
        XCTAssertEqual(records.map(\.newValue), [.int32(0), .int32(1), .int32(2), .int32(3), .int32(4)])
        XCTAssertEqual(records.map(\.caller?.userName), [nil, "alice", "bob", "alice", "bob"])
        return records
    }

    /// Rewrites the store at ``path`` as schema 9 held it: keys as text, the older rows in
    /// `history` with its three indexes, the others in `history_recent`; callers without
    /// `last_row`. (A store written by a schema-9 propbusd is left as it is.)
    private func downgradeToVersion9() throws {
        try HistoryIndexTests.downgradeToVersion10(path: path)
        let database = try SQLiteDatabase(path: path)
        guard try database.textRows("PRAGMA user_version") == ["10"] else { return }
        try database.execute("""
            CREATE TEMP TABLE saved AS
              SELECT h.id, h.change, h.revision, h.time, k.key, h.kind, h.old_value, h.new_value, h.via, h.caller
              FROM history h JOIN history_key k ON k.id = h.key_id;
            DROP TABLE history;
            DROP TABLE history_index;
            DROP TABLE history_by_change;
            DROP TABLE history_key;
            DROP INDEX history_caller_last_row;
            ALTER TABLE history_caller DROP COLUMN last_row;
            DELETE FROM meta WHERE name = 'history_indexed';
            CREATE TABLE history (id INTEGER PRIMARY KEY, change INTEGER NOT NULL, revision INTEGER NOT NULL, time INTEGER NOT NULL,
                key TEXT NOT NULL, kind TEXT NOT NULL, old_value BLOB, new_value BLOB, via TEXT NOT NULL, caller INTEGER);
            CREATE TABLE history_recent (id INTEGER PRIMARY KEY, change INTEGER NOT NULL, revision INTEGER NOT NULL, time INTEGER NOT NULL,
                key TEXT NOT NULL, kind TEXT NOT NULL, old_value BLOB, new_value BLOB, via TEXT NOT NULL, caller INTEGER);
            INSERT INTO history SELECT * FROM saved WHERE id = (SELECT min(id) FROM saved);
            INSERT INTO history_recent SELECT * FROM saved WHERE id > (SELECT min(id) FROM saved);
            CREATE INDEX history_key ON history (key, revision);
            CREATE INDEX history_change ON history (change);
            CREATE INDEX history_by_caller ON history (caller);
            PRAGMA user_version = 9;
            """)
    }

    /// Rewrites the store at ``path`` as schema 8 held it: every row with its caller's fields,
    /// the older rows in `history`, the last one in `history_recent`.
    private func downgradeToVersion8() throws {
        try downgradeToVersion9()
        let database = try SQLiteDatabase(path: path)
        try database.execute("""
            CREATE TEMP TABLE saved AS
              SELECT h.id, h.change, h.revision, h.time, h.key, h.kind, h.old_value, h.new_value, h.via,
                     c.uid, c.user, c.pid, c.comm, c.exe, c.unit, c.bus_name, c.host
              FROM (SELECT * FROM history UNION ALL SELECT * FROM history_recent) h LEFT JOIN history_caller c ON c.id = h.caller;
            DROP TABLE history;
            DROP TABLE history_recent;
            DROP TABLE history_caller;
            """)
        try database.execute(StoreSchema.historySchema)
        try database.execute("ALTER TABLE history ADD COLUMN host TEXT")
        try database.execute(StoreSchema.historyRecentSchema)
        try database.execute("""
            INSERT INTO history SELECT * FROM saved WHERE id < (SELECT max(id) FROM saved);
            INSERT INTO history_recent SELECT * FROM saved WHERE id = (SELECT max(id) FROM saved);
            PRAGMA user_version = 8;
            """)
    }
}
