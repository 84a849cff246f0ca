import DBusValues
import Foundation
import XCTest

@testable import PropBus
@testable import PropBusSystem

/// The key index of history (schema 11): one `history_index` entry per key per batch of
/// indexed rows, its other rows packed into the entry; what queries, per-key pruning, the
/// counts and the migration from schema 10 make of it.
final class HistoryIndexTests: XCTestCase {
    private var directory: URL!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("propbus-history-index-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: directory)
    }

    private var path: String { directory.appendingPathComponent(SQLiteStore.fileName).path }
    private let alice = WriteSet.Caller(via: "Set", busName: ":1.42", userID: 1000, userName: "alice", processID: 4242, command: "propctl")

    private func end(_ model: PropertyModel, _ store: PropertyStore) {
        XCTAssertNil(Round(model: model, commands: nil, store: store).end())
    }

    /// Creates `keys` (type i, default 0) and writes `rounds` rounds setting each of them to
    /// `round * 100 + its index`; no pruning step runs.
    private func write(_ keys: [String], rounds: ClosedRange<Int>, to model: PropertyModel, _ store: SQLiteStore, create: Bool = true) throws {
        if create {
            for key in keys { _ = try model.create(key: key, type: "i", defaultValue: .int32(0), options: [:]) }
            end(model, store)
        }
        for round in rounds {
            model.origin = .call(alice)
            _ = try model.apply(set: keys.enumerated().map { ($0.element, .int32(Int32(round * 100 + $0.offset))) }, reset: [])
            model.origin = .daemon
            end(model, store)
        }
    }

    private func values(of key: String, in store: SQLiteStore) throws -> [DBusValue?] {
        try store.history.records(prefix: key, after: 0, limit: 10_000).filter { $0.key.text == key }.map(\.newValue)
    }

    private func ints(_ values: [Int]) -> [DBusValue?] { values.map { .int32(Int32($0)) } }

    /// Entries in `history_index`, and the rows they count.
    private func entries(_ database: SQLiteDatabase, where condition: String = "1") throws -> (entries: Int, rows: Int) {
        let entries = Int(try database.textRows("SELECT count(*) FROM history_index WHERE \(condition)").first ?? "") ?? -1
        let rows = Int(try database.textRows("SELECT coalesce(sum(count), 0) FROM history_index WHERE \(condition)").first ?? "") ?? -1
        return (entries, rows)
    }

    func testABatchHoldsOneIndexEntryPerKeyWithItsRowsPacked() throws {
        let store = try SQLiteStore(path: path)
        store.history.options.indexBatch = 16
        let model = try PropertyModel(store: store)
        try write(["b.x", "b.y"], rounds: 1...9, to: model, store)
        // 2 created rows and 18 changes: one batch, one entry per key.
        while try store.history.pruneHistory() {}
        let database = try SQLiteDatabase(path: path)
        XCTAssertEqual(try database.textRows("SELECT count(*) FROM history WHERE id > (SELECT value FROM meta WHERE name = 'history_indexed')"), ["0"])
        let indexed = try entries(database)
        XCTAssertEqual(indexed.entries, 2, "one entry per key")
        XCTAssertEqual(indexed.rows, 20)
        XCTAssertEqual(try values(of: "b.x", in: store), ints([0] + (1...9).map { $0 * 100 }))
        XCTAssertEqual(try values(of: "b.y", in: store), ints([0] + (1...9).map { $0 * 100 + 1 }))
        let all = try store.history.records(prefix: "b.", after: 0, limit: 100)
        XCTAssertEqual(all.map(\.revision), all.map(\.revision).sorted())
        let fifth = all[9]
        XCTAssertEqual(try store.history.history(of: fifth.key, atOrBefore: fifth.revision).then?.newValue, fifth.newValue)
        XCTAssertEqual(try store.history.history(of: fifth.key, atOrBefore: fifth.revision - 1).then?.revision, all.filter { $0.key == fifth.key && $0.revision < fifth.revision }.last?.revision)
        XCTAssertEqual(try store.history.history(of: try Key("b.y"), atOrBefore: .max).latest?.newValue, .int32(901))
        XCTAssertEqual(try store.history.history(ofChange: fifth.change).map(\.newValue).count, 2, "one Apply, two keys")
    }

    /// Queries read the index and scan the tail (rows above `history_indexed`): every row comes
    /// once, in order, whether indexed, in the tail, or the tail's last before it is indexed,
    /// also page by page (``SQLiteStore/history(prefix:after:limit:)``).
    func testQueriesSeeTheTailAndTheIndexedRowsOnceEach() throws {
        let store = try SQLiteStore(path: path)
        store.history.options.indexBatch = 6
        let model = try PropertyModel(store: store)
        try write(["q.x", "q.y"], rounds: 1...4, to: model, store)
        while try store.history.pruneHistory() {}
        try write(["q.x", "q.y"], rounds: 5...6, to: model, store, create: false)
        let database = try SQLiteDatabase(path: path)
        XCTAssertEqual(try database.textRows("SELECT count(*) FROM history WHERE id > (SELECT value FROM meta WHERE name = 'history_indexed')"), ["4"])
        let expected = ints([0] + (1...6).map { $0 * 100 })
        XCTAssertEqual(try values(of: "q.x", in: store), expected)
        let all = try store.history.records(prefix: "q.", after: 0, limit: 100)
        XCTAssertEqual(all.count, 14)
        XCTAssertEqual(Set(all.map(\.revision)).count, 14, "no row twice")
        var paged: [HistoryRecord] = []
        var after: UInt64 = 0
        while case let page = try store.history.records(prefix: "q.", after: after, limit: 3), let last = page.last {
            XCTAssertLessThanOrEqual(page.count, 3)
            paged += page
            after = last.revision
        }
        XCTAssertEqual(paged.map(\.revision), all.map(\.revision))
        XCTAssertEqual(try store.history.records(prefix: "q.", after: 0, limit: 5).map(\.revision), Array(all.prefix(5).map(\.revision)))
        // What each key held at each of its revisions, indexed or not.
        for record in all {
            XCTAssertEqual(try store.history.history(of: record.key, atOrBefore: record.revision).then?.revision, record.revision)
        }
        XCTAssertEqual(try store.history.history(of: try Key("q.x"), atOrBefore: .max).latest?.newValue, .int32(600))
    }

    /// `maximumPerKey` deletes a key's oldest rows, some of them inside a packed entry: the key
    /// then reads back exactly the rows kept, in order, and its count is theirs.
    func testAKeyPrunedInPartReturnsExactlyTheRowsKeptInOrder() throws {
        let store = try SQLiteStore(path: path)
        store.history.options.indexBatch = 8
        store.history.options.maximumPerKey = 5
        let model = try PropertyModel(store: store)
        // No step between the rounds: a batch of the first 8 rows, then the rest; p.x's entry of
        // the first batch holds 4 of its rows and the second its last 9, of which 5 are kept.
        try write(["p.x", "p.y"], rounds: 1...12, to: model, store)
        while try store.history.pruneHistory() {}
        XCTAssertEqual(try values(of: "p.x", in: store), ints((8...12).map { $0 * 100 }))
        XCTAssertEqual(try values(of: "p.y", in: store), ints((8...12).map { $0 * 100 + 1 }))
        let database = try SQLiteDatabase(path: path)
        XCTAssertEqual(try database.textRows("SELECT count(*) FROM history"), ["10"])
        XCTAssertEqual(try entries(database).rows, 10, "the entries count the rows kept")
        let kept = try store.history.records(prefix: "p.x", after: 0, limit: 100)
        XCTAssertNil(try store.history.history(of: try Key("p.x"), atOrBefore: kept[0].revision - 1).then, "nothing kept before the oldest row kept")
        XCTAssertEqual(try store.history.history(of: try Key("p.x"), atOrBefore: kept[2].revision).then?.newValue, .int32(1000))
        XCTAssertEqual(try store.history.records(prefix: "p.", after: kept[1].revision, limit: 3).map(\.newValue), ints([901, 1000, 1001]))
        // Written on, still five, the oldest going first.
        try write(["p.x", "p.y"], rounds: 13...14, to: model, store, create: false)
        while try store.history.pruneHistory() {}
        XCTAssertEqual(try values(of: "p.x", in: store), ints((10...14).map { $0 * 100 }))
        XCTAssertEqual(try store.history.rows(of: try Key("p.x")), 5)
    }

    /// Rows pruned by the row bound go oldest first: an entry all of whose rows went goes with
    /// its last one; one that keeps some stays, counting those; a key with no row left is swept.
    func testAPackedEntryWhoseRowsAllWentIsRemoved() throws {
        let store = try SQLiteStore(path: path)
        store.history.options.indexBatch = 6
        let model = try PropertyModel(store: store)
        try write(["e.gone"], rounds: 1...2, to: model, store)
        while try store.history.pruneHistory() {}
        try write(["e.x", "e.y"], rounds: 1...3, to: model, store)
        while try store.history.pruneHistory() {}
        try write(["e.x", "e.y"], rounds: 4...6, to: model, store, create: false)
        while try store.history.pruneHistory() {}
        let database = try SQLiteDatabase(path: path)
        // e.gone's 3 rows, then (among others) 4 of e.x's and e.y's rows, then 3 of each.
        XCTAssertEqual(try entries(database).rows, 17)
        XCTAssertEqual(try entries(database, where: "key_id = (SELECT id FROM history_key WHERE key = 'e.gone')").entries, 1)
        store.history.options.maximumRows = 7
        while try store.history.pruneHistory() {}
        XCTAssertEqual(try database.textRows("SELECT count(*) FROM history"), ["7"])
        XCTAssertEqual(try entries(database).rows, 7)
        XCTAssertEqual(try entries(database, where: "count <= 0").entries, 0, "no entry of no row")
        XCTAssertEqual(try entries(database, where: "key_id = (SELECT id FROM history_key WHERE key = 'e.gone')").entries, 0)
        XCTAssertEqual(try database.textRows("SELECT key FROM history_key ORDER BY key"), ["e.x", "e.y"], "e.gone swept")
        // The last 7 rows: rounds 4 to 6, and round 3's e.y (written after its e.x).
        XCTAssertEqual(try values(of: "e.x", in: store), ints([400, 500, 600]))
        XCTAssertEqual(try values(of: "e.y", in: store), ints([301, 401, 501, 601]))
        store.history.options.maximumRows = 0
        while try store.history.pruneHistory() {}
        XCTAssertEqual(try entries(database).entries, 0)
        XCTAssertEqual(try store.history.records(prefix: "e.", after: 0, limit: 100).count, 0)
    }

    /// The step indexes the tail from the rows the commits kept in memory; a commit that failed
    /// after writing some of its rows (rolled back: they are not in the table) makes it read the
    /// tail back instead, so no entry counts a row that is not there.
    func testACommitThatFailsAfterItsFirstRowsLeavesNoEntryOfThem() throws {
        let store = try SQLiteStore(path: path)
        store.history.options.indexBatch = 6
        let model = try PropertyModel(store: store)
        try write(["f.x", "f.y"], rounds: 1...1, to: model, store)
        // f.y's row comes after f.x's in the commit: refusing it fails the commit there.
        try store.database.execute("""
            CREATE TRIGGER refuse BEFORE INSERT ON history WHEN new.key_id = (SELECT id FROM history_key WHERE key = 'f.y')
            BEGIN SELECT RAISE(ABORT, 'refused'); END
            """)
        model.origin = .call(alice)
        _ = try model.apply(set: [("f.x", .int32(7)), ("f.y", .int32(7))], reset: [])
        XCTAssertNotNil(Round(model: model, commands: nil, store: store).end(), "the commit fails")
        try store.database.execute("DROP TRIGGER refuse")
        try write(["f.x", "f.y"], rounds: 2...3, to: model, store, create: false)
        while try store.history.pruneHistory() {}
        let database = try SQLiteDatabase(path: path)
        XCTAssertEqual(try database.textRows("SELECT count(*) FROM history WHERE id > (SELECT value FROM meta WHERE name = 'history_indexed')"), ["0"])
        XCTAssertEqual(try database.textRows("SELECT count(*) FROM history"), ["8"])
        XCTAssertEqual(try entries(database).rows, 8, "no entry counts the rolled-back row")
        XCTAssertEqual(try values(of: "f.x", in: store), ints([0, 100, 200, 300]))
        XCTAssertEqual(try values(of: "f.y", in: store), ints([0, 101, 201, 301]))
    }

    /// At open the rows are counted from the index (its entries' counts) and the tail; a key's
    /// rows from its entries and the tail: partly pruned entries count what they keep.
    func testReopeningKeepsTheCountsRight() throws {
        do {
            let store = try SQLiteStore(path: path)
            store.history.options.indexBatch = 8
            store.history.options.maximumPerKey = 5
            let model = try PropertyModel(store: store)
            try write(["c.x", "c.y"], rounds: 1...12, to: model, store)
            while try store.history.pruneHistory() {}
            try write(["c.x"], rounds: 13...14, to: model, store, create: false)
        }
        let database = try SQLiteDatabase(path: path)
        let rows = Int(try database.textRows("SELECT count(*) FROM history").first ?? "")
        XCTAssertEqual(rows, 12, "5 of c.y's, 5 of c.x's and 2 in the tail")
        let store = try SQLiteStore(path: path)
        store.history.options.indexBatch = 8
        store.history.options.maximumPerKey = 5
        let model = try PropertyModel(store: store)
        XCTAssertEqual(store.history.rowCount, rows)
        let x = try Key("c.x")
        XCTAssertEqual(try store.history.rows(of: x), 7)
        // Written once more: c.x is past its bound and pruned to 5; then the row bound.
        try write(["c.x"], rounds: 15...15, to: model, store, create: false)
        while try store.history.pruneHistory() {}
        XCTAssertEqual(try values(of: "c.x", in: store), ints((11...15).map { $0 * 100 }))
        store.history.options.maximumRows = 6
        while try store.history.pruneHistory() {}
        XCTAssertEqual(try database.textRows("SELECT count(*) FROM history"), ["6"])
        XCTAssertEqual(store.history.rowCount, 6)
        // The last 6 rows: c.x's of rounds 13 to 15 and rounds 11 and 12 but round 11's c.x.
        XCTAssertEqual(try values(of: "c.x", in: store), ints((12...15).map { $0 * 100 }))
        XCTAssertEqual(try values(of: "c.y", in: store), ints([1101, 1201]))
    }

    /// Schema 10 → 11: a store whose index has one entry per row opens with every row findable
    /// by key, by change and by time, the tail's too, and rows written after it are indexed
    /// with them.
    func testVersion10StoreIsMigratedKeepingEveryRowFindableByKeyChangeAndTime() throws {
        var before: [HistoryRecord] = []
        var revisionsBefore: [UInt64] = []
        do {
            let store = try SQLiteStore(path: path)
            store.history.options.indexBatch = 6
            let model = try PropertyModel(store: store)
            try write(["m.x", "m.y"], rounds: 1...4, to: model, store)
            _ = try model.delete(key: "m.y")
            end(model, store)
            while try store.history.pruneHistory() {}
            try write(["m.x"], rounds: 5...6, to: model, store, create: false)
            before = try store.history.records(prefix: "m.", after: 0, limit: 100)
            revisionsBefore = try before.map { try store.history.historyRevision(before: $0.time) }
        }
        XCTAssertEqual(before.count, 13)
        try Self.downgradeToVersion10(path: path)
        do {
            let database = try SQLiteDatabase(path: path)
            XCTAssertEqual(try database.textRows("PRAGMA user_version"), ["10"])
            XCTAssertEqual(try database.textRows("SELECT count(*) FROM history_index"), ["11"], "one entry per indexed row")
        }
        let store = try SQLiteStore(path: path)
        store.history.options.indexBatch = 6
        let database = try SQLiteDatabase(path: path)
        XCTAssertEqual(try database.textRows("PRAGMA user_version"), ["\(SQLiteStore.schemaVersion)"])
        XCTAssertEqual(try entries(database).rows, 11, "the created rows, 4 rounds' and the deletion's; 2 in the tail")
        XCTAssertEqual(store.history.rowCount, 13)
        func check(_ store: SQLiteStore) throws {
            let after = Array(try store.history.records(prefix: "m.", after: 0, limit: 100).prefix(before.count))
            XCTAssertEqual(after.map(\.revision), before.map(\.revision))
            XCTAssertEqual(after.map(\.newValue), before.map(\.newValue))
            XCTAssertEqual(after.map(\.caller), before.map(\.caller))
            for record in before {
                XCTAssertEqual(try store.history.history(of: record.key, atOrBefore: record.revision).then?.revision, record.revision, "\(record)")
                XCTAssertTrue(try store.history.history(ofChange: record.change).contains { $0.revision == record.revision && $0.key == record.key }, "\(record)")
            }
            XCTAssertEqual(try before.map { try store.history.historyRevision(before: $0.time) }, revisionsBefore)
            XCTAssertEqual(try store.history.records(prefix: "m.y", after: 0, limit: 100).last?.kind, "deleted")
        }
        try check(store)
        // Written on: the new rows and the migrated ones indexed together, read once each.
        let model = try PropertyModel(store: store)
        try write(["m.x"], rounds: 7...10, to: model, store, create: false)
        while try store.history.pruneHistory() {}
        XCTAssertEqual(try database.textRows("SELECT count(*) FROM history WHERE id > (SELECT value FROM meta WHERE name = 'history_indexed')"), ["0"])
        XCTAssertEqual(try entries(database).rows, 17)
        XCTAssertEqual(try values(of: "m.x", in: store), ints([0] + (1...10).map { $0 * 100 }))
        try check(try SQLiteStore(path: path))
    }

    /// Rewrites the store at `path` as schema 10 held it: one `history_index` entry per indexed
    /// row, and the trigger deleting a row's entry. (A store of another version is left alone.)
    static func downgradeToVersion10(path: String) throws {
        try HistoryChargeStoreTests.downgradeToVersion11(path: path)
        let database = try SQLiteDatabase(path: path)
        guard try database.textRows("PRAGMA user_version") == ["11"] else { return }
        try database.execute("""
            DROP TRIGGER history_unindex;
            DROP TABLE history_index;
            CREATE TABLE history_index (
                key_id INTEGER NOT NULL,
                revision INTEGER NOT NULL,
                id INTEGER NOT NULL,
                PRIMARY KEY (key_id, revision, id)
            ) WITHOUT ROWID;
            INSERT INTO history_index (key_id, revision, id)
                SELECT key_id, revision, id FROM history WHERE id <= (SELECT value FROM meta WHERE name = 'history_indexed')
                ORDER BY key_id, revision, id;
            \(StoreSchema.historyUnindexTrigger10)
            PRAGMA user_version = 10;
            """)
    }
}
