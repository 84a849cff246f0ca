import DBusValues
import Foundation
import XCTest

@testable import PropBus
@testable import PropBusSystem

/// What the store's history holds is charged and bounded, and read back within bounds: values
/// past a size kept as digests, each uid's bytes (its own oldest rows going past its quota),
/// the total bytes, the transient keys' records in bytes; scans by uid and by prefix that read
/// about what they return; rows that belong to a definition deleted since; and stores of
/// schema 11 migrated with all of that.
final class HistoryChargeStoreTests: XCTestCase {
    private var directory: URL!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("propbus-charge-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: directory)
    }

    private var path: String { directory.appendingPathComponent(SQLiteStore.fileName).path }

    private func caller(_ uid: UInt32) -> WriteSet.Caller {
        WriteSet.Caller(via: "Set", busName: ":1.\(uid)", userID: uid, userName: "user\(uid)", processID: 42, command: "test")
    }

    private func end(_ model: PropertyModel, _ store: PropertyStore) {
        XCTAssertNil(Round(model: model, commands: nil, store: store).end())
    }

    /// Sets `key` to `value` as `uid` (the daemon when `nil`), one round.
    private func set(_ key: String, _ value: DBusValue, by uid: UInt32?, _ model: PropertyModel, _ store: PropertyStore) throws {
        model.origin = uid.map { .call(caller($0)) } ?? .daemon
        _ = try model.set(key, to: value)
        model.origin = .daemon
        end(model, store)
    }

    private func prune(_ store: SQLiteStore) throws {
        var steps = 0
        while try store.history.pruneHistory() {
            steps += 1
            XCTAssertLessThan(steps, 10_000, "pruning never ends")
        }
    }

    func testAValueAboveTheBoundIsKeptAsItsDigestAndStillComparesEqual() throws {
        let store = try SQLiteStore(path: path)
        store.history.options.maximumValueSize = 100
        let model = try PropertyModel(store: store)
        _ = try model.create(key: "a.big", type: "s", defaultValue: .string(""))
        _ = try model.create(key: "a.tmp", type: "s", defaultValue: .string(""), options: ["persistent": .boolean(false)])
        end(model, store)
        let big = DBusValue.string(String(repeating: "z", count: 5000))
        try set("a.big", big, by: 1000, model, store)
        try set("a.tmp", big, by: 1000, model, store)
        for key in ["a.big", "a.tmp"] {
            let record = try XCTUnwrap(try store.history.records(prefix: key).last)
            XCTAssertNil(record.newValue, key)
            XCTAssertEqual(record.newDigest, ValueDigest(of: big), key)
            XCTAssertEqual(record.newDigest?.size, UInt64(big.wireSize()))
            XCTAssertTrue(record.wrote(big))
            XCTAssertFalse(record.wrote(.string("other")))
            XCTAssertEqual(record.oldValue, .string(""), "a small value is kept whole")
        }
        // The row holds the digest, not the value: 40 bytes and the allowance, with the old value's.
        let used = try XCTUnwrap(store.history.historyUsage()[1000])
        XCTAssertLessThan(used, 400)
    }

    func testAUidsRowsPastItsQuotaGoOldestFirstAndNoOtherUidsRows() throws {
        let store = try SQLiteStore(path: path)
        store.history.options.maximumBytesPerUID = 20_000
        store.history.options.indexBatch = 8
        let model = try PropertyModel(store: store)
        for key in ["u.mine", "u.theirs"] { _ = try model.create(key: key, type: "s", defaultValue: .string("")) }
        end(model, store)
        try set("u.theirs", .string(String(repeating: "t", count: 3000)), by: 1001, model, store)
        for round in 0..<30 {
            try set("u.mine", .string(String(repeating: "\(round % 10)", count: 1000 + round)), by: 1000, model, store)
        }
        XCTAssertGreaterThan(store.history.historyUsage()[1000] ?? 0, 20_000)
        try prune(store)
        let mine = try XCTUnwrap(store.history.historyUsage()[1000])
        XCTAssertLessThanOrEqual(mine, 20_000)
        let rows = try store.history.records(prefix: "u.mine").filter { $0.via == "Set" }
        XCTAssertLessThan(rows.count, 30)
        XCTAssertEqual(rows.last?.newValue, .string(String(repeating: "9", count: 1029)), "the newest are kept")
        XCTAssertEqual(rows.map(\.revision), rows.map(\.revision).sorted())
        XCTAssertEqual(try store.history.records(prefix: "u.theirs").last?.newValue, .string(String(repeating: "t", count: 3000)))
        // What the trigger took off is what the rows held: the counts agree with a fresh sum.
        let database = try SQLiteDatabase(path: path)
        let summed = try database.textRows("""
            SELECT sum(coalesce(length(old_value), 0) + coalesce(length(new_value), 0) + \(HistoryRecord.fieldAllowance)) FROM history h
            JOIN history_caller c ON c.id = h.caller WHERE c.uid = 1000
            """)
        XCTAssertEqual(summed, ["\(mine)"])
        XCTAssertEqual(try database.textRows("SELECT sum(coalesce(length(old_value), 0) + coalesce(length(new_value), 0) + \(HistoryRecord.fieldAllowance)) FROM history"),
                       ["\(store.history.storedBytes)"])
        // And as the store reads them back when it opens.
        XCTAssertEqual(try SQLiteStore(path: path).history.storedBytes, store.history.storedBytes)
    }

    func testTheBytesBoundPrunesTheOldestRowsOfAnyone() throws {
        let store = try SQLiteStore(path: path)
        store.history.options.maximumBytes = 30_000
        let model = try PropertyModel(store: store)
        _ = try model.create(key: "b.x", type: "s", defaultValue: .string(""))
        end(model, store)
        for round in 0..<40 { try set("b.x", .string(String(repeating: "\(round % 10)", count: 1000)), by: nil, model, store) }
        try prune(store)
        XCTAssertLessThanOrEqual(store.history.storedBytes, 30_000)
        XCTAssertGreaterThan(store.history.storedBytes, 20_000)
        XCTAssertEqual(try store.history.records(prefix: "b.x").last?.newValue, .string(String(repeating: "9", count: 1000)))
    }

    func testTransientHistoryIsBoundedInBytesAndByEachUidsQuota() throws {
        let store = try SQLiteStore(path: path)
        store.history.options.maximumTransientBytes = 50_000
        store.history.options.maximumBytesPerUID = 20_000
        let model = try PropertyModel(store: store)
        for key in ["t.a", "t.b"] { _ = try model.create(key: key, type: "s", defaultValue: .string(""), options: ["persistent": .boolean(false)]) }
        end(model, store)
        for round in 0..<100 {
            try set("t.a", .string(String(repeating: "a", count: 2000 + round)), by: 1000, model, store)
            try set("t.b", .string(String(repeating: "b", count: 2000 + round)), by: nil, model, store)
        }
        let usage = store.history.historyUsage()
        XCTAssertLessThanOrEqual(usage[1000] ?? .max, 20_000)
        let records = try store.history.records(prefix: "t.")
        XCTAssertLessThanOrEqual(records.reduce(0) { $0 + $1.chargedBytes }, 50_000)
        XCTAssertEqual(records.last { $0.key.text == "t.a" }?.newValue, .string(String(repeating: "a", count: 2099)))
    }

    func testAScanByUidReadsThatUidsRowsAndAScanByPrefixIsBoundedPerCall() throws {
        let store = try SQLiteStore(path: path)
        store.history.options.indexBatch = 64
        let model = try PropertyModel(store: store)
        for index in 0..<100 { _ = try model.create(key: "few.k\(index)", type: "i", defaultValue: .int32(0)) }
        _ = try model.create(key: "many.x", type: "i", defaultValue: .int32(0))
        end(model, store)
        for round in 1...3000 {
            try set("many.x", .int32(Int32(round)), by: 1000, model, store)
            if round % 100 == 0 { try set("few.k\(round / 100)", .int32(1), by: 1001, model, store) }
            if round % 500 == 0 { try prune(store) }
        }
        try prune(store)
        // uid 1001's 30 rows, found through its index: about that many rows examined.
        let (mine, end) = try store.history.history(HistoryQuery(userID: 1001), limit: 1000, examining: 10_000)
        XCTAssertEqual(mine.count, 30)
        XCTAssertNil(end.next)
        XCTAssertLessThanOrEqual(end.examined, 30 + 64, "rows of other uids read")
        let byName = try store.history.history(HistoryQuery(userName: "user1001"), limit: 1000, examining: 10_000)
        XCTAssertEqual(byName.records.map(\.revision), mine.map(\.revision))
        let nobody = try store.history.history(HistoryQuery(userID: 4242), limit: 1000, examining: 10_000)
        XCTAssertTrue(nobody.records.isEmpty)
        XCTAssertEqual(nobody.end, HistoryScanEnd(next: nil, examined: 0))
        // `few.` holds 100 keys, more than the key index is read for: rows in order, 500 at
        // most examined per call, and a cursor to go on; all 130 rows through the cursor, once.
        var seen: [UInt64] = [], after: UInt64 = 0, calls = 0
        repeat {
            let (records, end) = try store.history.history(HistoryQuery(prefix: "few.", after: after), limit: 1000, examining: 500)
            XCTAssertLessThanOrEqual(end.examined, 500 + HistoryScanner.chunkRows + 1)
            seen += records.map(\.revision)
            after = end.next ?? 0
            calls += 1
        } while after != 0 && calls < 100
        XCTAssertEqual(seen.count, 130)
        XCTAssertEqual(seen, seen.sorted())
        XCTAssertEqual(Set(seen).count, 130)
        XCTAssertGreaterThan(calls, 5)
        // A prefix of 11 keys (few.k7, few.k70 to few.k79): through the key index, their rows only.
        let one = try store.history.history(HistoryQuery(prefix: "few.k7"), limit: 1000, examining: 10_000)
        XCTAssertEqual(one.records.count, 12)
        XCTAssertLessThanOrEqual(one.end.examined, 12 + 64)
    }

    func testRowsOfADeletedDefinitionStaySoWhenTheKeyComesBack() throws {
        let store = try SQLiteStore(path: path)
        let model = try PropertyModel(store: store)
        for (key, persistent) in [("d.p", true), ("d.t", false)] {
            _ = try model.create(key: key, type: "s", defaultValue: .string(""), options: ["secret": .boolean(true), "persistent": .boolean(persistent)])
        }
        end(model, store)
        for key in ["d.p", "d.t"] {
            try set(key, .string("old"), by: 1000, model, store)
            _ = try model.delete(key: key)
            end(model, store)
            _ = try model.create(key: key, type: "s", defaultValue: .string(""), options: ["persistent": .boolean(key == "d.p")])
            end(model, store)
            try set(key, .string("new"), by: 1000, model, store)
        }
        for key in ["d.p", "d.t"] {
            let records = try store.history.records(prefix: key)
            XCTAssertEqual(records.map(\.kind), ["created", "changed", "deleted", "created", "changed"], key)
            XCTAssertEqual(records.map(\.ofDeletedDefinition), [true, true, true, false, false], key)
            XCTAssertEqual(records.map { $0.flags.contains(.secret) }, [true, true, true, false, false], key)
            let old = try XCTUnwrap(records.first { $0.newValue == .string("old") })
            XCTAssertEqual(try store.history.history(of: try Key(key), atOrBefore: old.revision).then?.ofDeletedDefinition, true)
        }
        // And after reopening, read from the key table.
        let reopened = try SQLiteStore(path: path)
        XCTAssertEqual(try reopened.history.records(prefix: "d.p").map(\.ofDeletedDefinition), [true, true, true, false, false])
    }

    func testAResetRecordsThatTheKeyHasNoValueOfItsOwnAndASetFromThereThatItHadNone() throws {
        let store = try SQLiteStore(path: path)
        let model = try PropertyModel(store: store)
        _ = try model.create(key: "r.x", type: "i", defaultValue: .int32(5))
        end(model, store)
        try set("r.x", .int32(7), by: 1000, model, store)
        _ = try model.apply(set: [], reset: ["r.x"])
        end(model, store)
        let records = try store.history.records(prefix: "r.x")
        XCTAssertEqual(records.map { $0.flags.intersection([.oldUnset, .newUnset]) }, [[.newUnset], [.oldUnset], [.newUnset]])
    }

    /// Rewrites the store at `path` as schema 11 held it: no flags, definitions, uid index or
    /// bytes, and schema 11's trigger. (A store of another version is left alone.)
    static func downgradeToVersion11(path: String) throws {
        let database = try SQLiteDatabase(path: path)
        guard try database.textRows("PRAGMA user_version") == ["12"] else { return }
        try database.execute("""
            DROP TRIGGER history_unindex;
            DROP TABLE history_by_uid;
            DROP INDEX history_caller_user;
            DROP INDEX history_caller_uid;
            ALTER TABLE history DROP COLUMN flags;
            ALTER TABLE history_key DROP COLUMN born;
            ALTER TABLE history_key DROP COLUMN alive;
            DELETE FROM meta WHERE name >= 'history_bytes' AND name < 'history_bytes~';
            \(StoreSchema.historyUnindexTrigger11)
            PRAGMA user_version = 11;
            """)
    }

    func testVersion11StoreIsMigratedWithItsBytesItsDefinitionsAndItsUidIndex() throws {
        do {
            let store = try SQLiteStore(path: path)
            store.history.options.indexBatch = 4
            let model = try PropertyModel(store: store)
            _ = try model.create(key: "m.x", type: "s", defaultValue: .string(""))
            _ = try model.create(key: "m.y", type: "s", defaultValue: .string(""))
            end(model, store)
            for round in 0..<6 { try set("m.x", .string("x\(round)"), by: round % 2 == 0 ? 1000 : 1001, model, store) }
            try set("m.y", .string("old"), by: 1000, model, store)
            _ = try model.delete(key: "m.y")
            end(model, store)
            try prune(store)
            _ = try model.create(key: "m.y", type: "s", defaultValue: .string(""))
            end(model, store)
            try set("m.y", .string("new"), by: 1001, model, store)
        }
        try Self.downgradeToVersion11(path: path)
        XCTAssertEqual(try SQLiteDatabase(path: path).textRows("PRAGMA user_version"), ["11"])
        let store = try SQLiteStore(path: path)
        let database = try SQLiteDatabase(path: path)
        XCTAssertEqual(try database.textRows("PRAGMA user_version"), ["\(SQLiteStore.schemaVersion)"])
        XCTAssertEqual(try database.textRows("SELECT sum(coalesce(length(old_value), 0) + coalesce(length(new_value), 0) + \(HistoryRecord.fieldAllowance)) FROM history"),
                       ["\(store.history.storedBytes)"])
        XCTAssertEqual(store.history.historyUsage().keys.sorted(), [1000, 1001])
        let y = try store.history.records(prefix: "m.y")
        XCTAssertEqual(y.map(\.ofDeletedDefinition), [true, true, true, false, false])
        let by1001 = try store.history.history(HistoryQuery(userID: 1001), limit: 100, examining: 1000).records
        XCTAssertEqual(by1001.map(\.newValue), [.string("x1"), .string("x3"), .string("x5"), .string("new")])
        // Written on: new rows are charged and indexed with the migrated ones.
        let model = try PropertyModel(store: store)
        try set("m.x", .string("later"), by: 1001, model, store)
        try prune(store)
        XCTAssertEqual(try store.history.history(HistoryQuery(userID: 1001), limit: 100, examining: 1000).records.last?.newValue, .string("later"))
    }
}
