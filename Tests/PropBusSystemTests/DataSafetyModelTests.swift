import DBusValues
import Foundation
import PropBusModelFiles
import XCTest

@testable import PropBus
@testable import PropBusSystem

/// Data safety at the model and store level: hidden values, retired keys, pruning, model files
/// skipped as a whole, revision reservations and the store's identity.
final class DataSafetyModelTests: XCTestCase {
    private var directory: String!

    override func setUp() {
        super.setUp()
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("propbus-safety-\(UUID().uuidString)").path
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: directory)
        super.tearDown()
    }

    private var path: String { directory + "/propbus.db" }

    private func volume(_ model: PropertyModel, maximum: Int32) throws {
        _ = try model.create(key: "demo.vol", type: "i", defaultValue: .int32(5), options: ["maximum": .int32(maximum)])
    }

    func testNarrowingHidesTheStoredValueAndWideningRestoresIt() throws {
        let model = try PropertyModel(store: MemoryStore())
        try volume(model, maximum: 100)
        _ = try model.set("demo.vol", to: .int32(80))
        try volume(model, maximum: 50)
        let hidden = try model.entry("demo.vol")
        XCTAssertEqual(hidden.value, .int32(5))
        XCTAssertEqual(hidden.hidden?.value, .int32(80))
        XCTAssertTrue(hidden.hidden?.reason.contains("50") ?? false, hidden.hidden?.reason ?? "")
        try volume(model, maximum: 100)
        XCTAssertEqual(try model.value(of: "demo.vol"), .int32(80))
        XCTAssertNil(try model.entry("demo.vol").hidden)
    }

    func testASetReplacesAHiddenValue() throws {
        let model = try PropertyModel(store: MemoryStore())
        try volume(model, maximum: 100)
        _ = try model.set("demo.vol", to: .int32(80))
        try volume(model, maximum: 50)
        _ = try model.set("demo.vol", to: .int32(40))
        try volume(model, maximum: 100)
        XCTAssertEqual(try model.value(of: "demo.vol"), .int32(40))
    }

    func testHiddenValueStaysInTheStoreAcrossReopening() throws {
        do {
            let store = try SQLiteStore(path: path)
            let model = try PropertyModel(store: store)
            try volume(model, maximum: 100)
            _ = try model.set("demo.vol", to: .int32(80))
            try volume(model, maximum: 50)
            try model.commit(to: store)
        }
        let store = try SQLiteStore(path: path)
        let model = try PropertyModel(store: store)
        XCTAssertEqual(try model.entry("demo.vol").hidden?.value, .int32(80), "loaded hidden")
        try volume(model, maximum: 100)
        XCTAssertEqual(try model.value(of: "demo.vol"), .int32(80))
    }

    func testRetiredKeyKeepsItsValueUntilPruned() throws {
        let model = try PropertyModel(store: MemoryStore())
        _ = try model.create(key: "app.x", type: "i", defaultValue: .int32(1))
        _ = try model.set("app.x", to: .int32(7))
        let changes = model.retire(try Key("app.x"))
        XCTAssertEqual(changes.count, 1)
        XCTAssertNil(model.entry(for: try Key("app.x")))
        XCTAssertEqual(model.unclaimed.map(\.value), [.int32(7)])
        _ = try model.create(key: "app.x", type: "i", defaultValue: .int32(1))
        XCTAssertEqual(try model.value(of: "app.x"), .int32(7))
        _ = model.retire(try Key("app.x"))
        XCTAssertEqual(model.prune([try Key("app.x")]).map(\.text), ["app.x"])
        XCTAssertTrue(model.unclaimed.isEmpty)
    }

    func testRetireAndPruneRollBackWithTheRound() throws {
        let model = try PropertyModel(store: MemoryStore())
        _ = try model.create(key: "app.x", type: "i", defaultValue: .int32(1))
        _ = try model.set("app.x", to: .int32(7))
        model.commitRound()
        _ = model.retire(try Key("app.x"))
        model.rollbackRound()
        XCTAssertEqual(try model.value(of: "app.x"), .int32(7))
        XCTAssertTrue(model.unclaimed.isEmpty)
    }

    func testABadModelFileIsSkippedAsAWholeAndTheOthersLoad() throws {
        let good = directory + "/good.json", bad = directory + "/bad.json"
        try #"{"groups": {"a": {"properties": {"x": {"type": "i", "default": 1}}}}}"#.write(toFile: good, atomically: true, encoding: .utf8)
        // The first property applies, the second cannot: the file must leave no trace.
        try #"{"groups": {"b": {"properties": {"ok": {"type": "i"}, "bad": {"type": "i", "default": 9, "maximum": 5}}}}}"#
            .write(toFile: bad, atomically: true, encoding: .utf8)
        let store = try SQLiteStore(path: path)
        let model = try PropertyModel(store: store)
        let files = ModelFileSet()
        let report = try files.load([good, bad], into: model, commands: CommandTable(model: model), strict: false)
        XCTAssertEqual(report.loaded, [good])
        XCTAssertEqual(files.skipped.map(\.path), [bad])
        XCTAssertTrue(files.skipped.first?.reason.hasPrefix(bad + ":") ?? false, "\(files.skipped)")
        XCTAssertNotNil(model.entry(for: try Key("a.x")))
        XCTAssertNil(model.entry(for: try Key("b.ok")), "a skipped file leaves nothing behind")
        try model.commit(to: store)
        let reopened = try PropertyModel(store: SQLiteStore(path: path))
        XCTAssertNil(reopened.entry(for: try Key("b.ok")), "nor in the store")
        XCTAssertEqual(reopened.entry(for: try Key("a.x"))?.definition.source, good)
        XCTAssertThrowsError(try ModelFileSet().load([bad], into: model, commands: CommandTable(model: model), strict: true))
    }

    func testTransientChangesUseReservedRevisionsWithoutWrites() throws {
        let store = try SQLiteStore(path: path)
        let model = try PropertyModel(store: store)
        _ = try model.create(key: "vm.t", type: "i", defaultValue: .int32(0), options: ["persistent": .boolean(false)])
        try model.commit(to: store)
        model.commitRound()
        for value in 1...100 {
            _ = try model.set("vm.t", to: .int32(Int32(value)))
            XCTAssertFalse(model.storeChanges.hasWrites, "transient change \(value) wrote to the store")
        }
        let last = model.revision
        try model.commit(to: store)
        let reopened = try PropertyModel(store: SQLiteStore(path: path))
        XCTAssertGreaterThan(reopened.revision, last, "a restart starts above every revision handed out")
    }

    func testForeignDatabaseIsRefused() throws {
        do {
            let database = try SQLiteDatabase(path: path)
            try database.execute("CREATE TABLE contacts (name TEXT)")
        }
        XCTAssertThrowsError(try SQLiteStore(path: path)) { error in
            let message = (error as? PropBusError)?.message ?? "\(error)"
            XCTAssertTrue(message.contains("not a propbus store"), message)
            XCTAssertFalse(SQLiteStore.isCorruption(error as! PropBusError))
        }
    }

    func testDiskErrorsAreNotCorruption() {
        let full = SQLiteStore.describe(SQLiteError(code: 13, message: "database or disk is full"), path: "/x/propbus.db")
        XCTAssertFalse(SQLiteStore.isCorruption(full))
        XCTAssertTrue(full.message.contains("full"))
        let denied = SQLiteStore.describe(SQLiteError(code: 14, message: "unable to open database file"), path: "/x/propbus.db")
        XCTAssertFalse(SQLiteStore.isCorruption(denied))
        let corrupt = SQLiteStore.describe(SQLiteError(code: 11, message: "database disk image is malformed"), path: "/x/propbus.db")
        XCTAssertTrue(SQLiteStore.isCorruption(corrupt))
    }
}
