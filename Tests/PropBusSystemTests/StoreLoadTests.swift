import DBusValues
import Foundation
import XCTest

@testable import PropBus
@testable import PropBusSystem

/// Loading a store in one pass: definitions joined with their values, each distinct
/// (type, default, options) decoded once. A store as earlier releases wrote it (schema 3, the
/// same rows) must load into the same model.
final class StoreLoadTests: XCTestCase {
    private var directory: URL!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("propbus-load-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: directory)
    }

    private var path: String { directory.appendingPathComponent(SQLiteStore.fileName).path }

    private func blob(_ value: DBusValue) -> String {
        "x'" + ValueCodec.encode(value).map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined() + "'"
    }

    /// The rows an earlier propbusd wrote, by hand: schema 3 and `PRAGMA user_version`, no
    /// `application_id` (it came later; the store gets it with its next commit).
    private func writeEarlierStore() throws {
        let database = try SQLiteDatabase(path: path)
        let none = blob(.vardict([:]))
        let described = blob(.vardict(["description": .variant(.string("hello"))]))
        let ranged = blob(.vardict(["minimum": .variant(.int32(1)), "maximum": .variant(.int32(9))]))
        try database.execute("""
            CREATE TABLE definitions (key TEXT PRIMARY KEY NOT NULL, type TEXT NOT NULL, default_value BLOB NOT NULL, options BLOB NOT NULL) WITHOUT ROWID;
            CREATE TABLE stored_values (key TEXT PRIMARY KEY NOT NULL, value BLOB NOT NULL, revision INTEGER NOT NULL) WITHOUT ROWID;
            CREATE TABLE meta (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL) WITHOUT ROWID;
            CREATE TABLE bindings (id INTEGER PRIMARY KEY NOT NULL, key TEXT NOT NULL, target TEXT NOT NULL, options BLOB NOT NULL);
            CREATE TABLE commands (key TEXT PRIMARY KEY NOT NULL, options BLOB NOT NULL) WITHOUT ROWID;
            INSERT INTO definitions VALUES ('a.x', 'i', \(blob(.int32(0))), \(none));
            INSERT INTO definitions VALUES ('a.y', 'i', \(blob(.int32(0))), \(none));
            INSERT INTO definitions VALUES ('b.z', 's', \(blob(.string(""))), \(described));
            INSERT INTO definitions VALUES ('b.w', 's', \(blob(.string(""))), \(none));
            INSERT INTO definitions VALUES ('c.q', 'i', \(blob(.int32(0))), \(ranged));
            INSERT INTO definitions VALUES ('c.r', 'i', \(blob(.int32(0))), \(ranged));
            INSERT INTO stored_values VALUES ('a.x', \(blob(.int32(5))), 3);
            INSERT INTO stored_values VALUES ('c.q', \(blob(.int32(7))), 4);
            INSERT INTO stored_values VALUES ('c.r', \(blob(.int32(50))), 5);
            INSERT INTO stored_values VALUES ('o.p', \(blob(.int32(11))), 9);
            INSERT INTO meta VALUES ('revision', 9);
            PRAGMA user_version = 3;
            """)
    }

    func testAStoreWrittenByAnEarlierReleaseLoadsIntoTheSameModel() throws {
        try writeEarlierStore()
        let store = try SQLiteStore(path: path)
        let state = try store.load()
        XCTAssertEqual(state.definitions.map(\.key.text), ["a.x", "a.y", "b.w", "b.z", "c.q", "c.r"])
        XCTAssertEqual(state.definitionValues.map { $0?.value }, [.int32(5), nil, nil, nil, .int32(7), .int32(50)])
        XCTAssertEqual(Array(state.values.keys), [try Key("o.p")], "only the value without a definition is left by key")

        let model = PropertyModel(store: store, loaded: state)
        XCTAssertEqual(model.count, 6)
        XCTAssertEqual(try model.entry("a.x").value, .int32(5))
        XCTAssertEqual(try model.entry("a.x").revision, 3)
        // Definitions decoded from one shared (type, default, options) keep their own keys.
        XCTAssertEqual(try model.entry("a.y").definition.key.text, "a.y")
        XCTAssertEqual(try model.entry("a.y").value, .int32(0))
        XCTAssertEqual(try model.entry("b.z").definition.description, "hello")
        XCTAssertEqual(try model.entry("b.w").definition.description, "", "options of another row do not leak")
        XCTAssertEqual(try model.entry("c.q").definition.maximum, .int32(9))
        XCTAssertEqual(try model.entry("c.q").value, .int32(7))
        // Out of range for its definition: hidden, not lost.
        XCTAssertEqual(try model.entry("c.r").value, .int32(0))
        XCTAssertEqual(try model.entry("c.r").hidden?.value, .int32(50))
        XCTAssertEqual(model.revision, 9)
        XCTAssertEqual(model.names(inGroup: "c"), ["q", "r"])
        // The value without a definition waits for one.
        _ = try model.create(key: "o.p", type: "i", defaultValue: .int32(0))
        XCTAssertEqual(try model.value(of: "o.p"), .int32(11))
    }

    func testAStateWithValuesByKeyOnlyLoadsLikeAnAlignedOne() throws {
        // What a store that does not align values (MemoryStore-like, tests) hands the model.
        var state = StoredState()
        state.definitions = [PropertyDefinition(key: try Key("a.x"), type: .int32, defaultValue: .int32(0)),
                             PropertyDefinition(key: try Key("a.y"), type: .int32, defaultValue: .int32(0))]
        state.values[try Key("a.x")] = (.int32(5), 3)
        state.values[try Key("o.p")] = (.int32(11), 9)
        let model = PropertyModel(store: MemoryStore(), loaded: state)
        XCTAssertEqual(try model.value(of: "a.x"), .int32(5))
        XCTAssertEqual(try model.value(of: "a.y"), .int32(0))
        XCTAssertEqual(model.revision, 9)
        _ = try model.create(key: "o.p", type: "i", defaultValue: .int32(0))
        XCTAssertEqual(try model.value(of: "o.p"), .int32(11))
    }
}
