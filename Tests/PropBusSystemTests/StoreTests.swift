import DBusValues
import Foundation
import XCTest

@testable import PropBus
@testable import PropBusSystem

final class StoreTests: XCTestCase {
    private var directory: URL!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("propbus-store-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: directory)
    }

    private var path: String { directory.appendingPathComponent(SQLiteStore.fileName).path }

    private func model(_ store: PropertyStore) throws -> PropertyModel { try PropertyModel(store: store) }

    // MARK: SQLiteStore

    func testValuesAndRuntimeDefinitionsSurviveReopening() throws {
        do {
            let store = try SQLiteStore(path: path)
            let model = try model(store)
            _ = try model.create(key: "app.volume", type: "d", defaultValue: .double(0.5),
                                 options: ["minimum": .double(0), "maximum": .double(1), "description": .string("Volume")])
            _ = try model.create(key: "app.name", type: "s", defaultValue: .string("x"), options: ["choices": .array(of: .variant, [.variant(.string("x")), .variant(.string("y"))])])
            _ = try model.create(key: "app.big", type: "t", defaultValue: .uint64(0))
            _ = try model.set("app.volume", to: .double(0.1))
            _ = try model.set("app.name", to: .string("y"))
            _ = try model.set("app.big", to: .uint64(UInt64.max))
            try model.commit(to: store)
            model.commitRound()
        }
        let store = try SQLiteStore(path: path)
        let model = try model(store)
        XCTAssertEqual(try model.value(of: "app.volume"), .double(0.1))
        XCTAssertEqual(try model.value(of: "app.name"), .string("y"))
        XCTAssertEqual(try model.value(of: "app.big"), .uint64(UInt64.max))
        let volume = try model.entry("app.volume").definition
        XCTAssertEqual(volume.minimum, .double(0))
        XCTAssertEqual(volume.maximum, .double(1))
        XCTAssertEqual(volume.description, "Volume")
        XCTAssertEqual(volume.defaultValue, .double(0.5))
        XCTAssertEqual(try model.entry("app.name").definition.choices, [.string("x"), .string("y")])
        // Revisions resume above the last run's reserved block (transient changes
        // use reserved revisions without a write of their own), never below where it stopped.
        XCTAssertGreaterThanOrEqual(model.revision, 6, "revisions continue where the last run stopped")
    }

    func testVariantTypedPropertyKeepsOneVariantLevelAndSurvivesReopening() throws {
        do {
            let store = try SQLiteStore(path: path)
            let model = try model(store)
            // As CreateProperty passes it: the wire's `v` around the `v` default.
            _ = try model.create(key: "app.any", type: "v", defaultValue: .variant(.variant(.string("x"))))
            XCTAssertEqual(try model.value(of: "app.any"), .variant(.string("x")))
            _ = try model.set("app.any", to: .variant(.array(of: .int32, [.int32(1)])))
            try model.commit(to: store)
        }
        let model = try model(SQLiteStore(path: path))
        XCTAssertEqual(try model.value(of: "app.any"), .variant(.array(of: .int32, [.int32(1)])))
        XCTAssertEqual(try model.entry("app.any").definition.defaultValue, .variant(.string("x")))
    }

    func testUncommittedWritesAreNotStored() throws {
        do {
            let store = try SQLiteStore(path: path)
            let model = try model(store)
            _ = try model.create(key: "app.a", type: "i", defaultValue: .int32(0))
            try model.commit(to: store)
            _ = try model.set("app.a", to: .int32(5))
            model.rollbackRound()
        }
        XCTAssertEqual(try model(SQLiteStore(path: path)).value(of: "app.a"), .int32(0))
    }

    func testResetDeletesTheStoredValueSoANewDefaultShowsThrough() throws {
        do {
            let store = try SQLiteStore(path: path)
            let model = try model(store)
            _ = try model.create(key: "app.a", type: "i", defaultValue: .int32(1))
            _ = try model.set("app.a", to: .int32(5))
            _ = try model.reset("app.a")
            try model.commit(to: store)
        }
        let store = try SQLiteStore(path: path)
        let model = try model(store)
        XCTAssertNil(try model.entry("app.a").storedValue)
        _ = try model.create(key: "app.a", type: "i", defaultValue: .int32(2))
        XCTAssertEqual(try model.value(of: "app.a"), .int32(2))
        XCTAssertGreaterThanOrEqual(model.revision, 4, "a trailing Reset's revision survives too")
    }

    func testTransientValuesNeverReachTheStore() throws {
        do {
            let store = try SQLiteStore(path: path)
            let model = try model(store)
            _ = try model.create(key: "vm.search", type: "s", defaultValue: .string(""), options: ["persistent": .boolean(false)])
            _ = try model.set("vm.search", to: .string("cats"))
            try model.commit(to: store)
        }
        let model = try model(SQLiteStore(path: path))
        XCTAssertEqual(try model.value(of: "vm.search"), .string(""), "the definition persists, the value does not")
        XCTAssertEqual(try model.entry("vm.search").definition.persistent, false)
    }

    func testDeletedPropertiesStayDeleted() throws {
        do {
            let store = try SQLiteStore(path: path)
            let model = try model(store)
            _ = try model.create(key: "app.a", type: "i", defaultValue: .int32(1))
            _ = try model.set("app.a", to: .int32(5))
            try model.commit(to: store)
            _ = try model.delete(key: "app.a")
            try model.commit(to: store)
        }
        XCTAssertEqual(try model(SQLiteStore(path: path)).count, 0)
    }

    func testStoredValueOfAPropertyDeclaredLaterIsAdopted() throws {
        do {
            let store = try SQLiteStore(path: path)
            let model = try model(store)
            _ = try model.create(key: "app.a", type: "i", defaultValue: .int32(1))
            _ = try model.set("app.a", to: .int32(5))
            try model.commit(to: store)
        }
        // As a model file would: the definition is declared again after loading.
        let model = try model(SQLiteStore(path: path))
        _ = try model.create(key: "app.a", type: "i", defaultValue: .int32(1))
        XCTAssertEqual(try model.value(of: "app.a"), .int32(5))
    }

    /// The store's one way in: a round's rows as a value built by hand, written in one
    /// transaction (last write per key wins within it) and read back; removals; a round with
    /// nothing to write creates no file.
    func testACommitWritesAWriteSetBuiltByHand() throws {
        let store = try SQLiteStore(path: path)
        let key = try Key("app.volume"), command = try Key("jobs.run")
        var rows = StoreChanges()
        rows.saveDefinition(PropertyDefinition(key: key, type: .int32, defaultValue: .int32(1)))
        rows.saveValue(.int32(7), revision: 3, for: key)
        rows.saveValue(.int32(8), revision: 4, for: key)
        rows.saveRevision(10)
        rows.saveBinding(Binding(id: 5, key: key, to: try Key("app.other"), direction: .from, persistent: true))
        rows.saveNextBindingID(6)
        rows.saveCommand(command, options: ["exec": .array(of: .string, [.string("true")])])
        rows.saveExternalRevisions(ExternalRevisions(value: 12, definition: 3), for: key)
        rows.saveExternalCursor(40)
        rows.saveExternalSource("http://127.0.0.1:2379/propbus")
        rows.saveNextLeaseHandle(9)
        try store.commit(WriteSet(store: rows), durability: .full)
        let loaded = try SQLiteStore(path: path).load()
        XCTAssertEqual(loaded.definitions.map(\.key), [key])
        XCTAssertEqual(loaded.storedValue(ofDefinitionAt: 0)?.value, .int32(8), "the last write of the round")
        XCTAssertEqual(loaded.storedValue(ofDefinitionAt: 0)?.revision, 4)
        XCTAssertEqual(loaded.revision, 10)
        XCTAssertEqual(loaded.bindings.map(\.id), [5])
        XCTAssertEqual(loaded.nextBindingID, 6)
        XCTAssertEqual(loaded.commands.map(\.key), [command])
        XCTAssertEqual(loaded.externalRevisions, [key: ExternalRevisions(value: 12, definition: 3)])
        XCTAssertEqual(loaded.externalCursor, 40)
        XCTAssertEqual(loaded.externalSource, "http://127.0.0.1:2379/propbus")
        XCTAssertEqual(loaded.nextLeaseHandle, 9)

        var removals = StoreChanges()
        removals.removeDefinition(key)
        removals.removeBinding(5)
        removals.removeCommand(command)
        removals.removeExternalRevisions(for: key)
        try store.commit(WriteSet(store: removals), durability: .replayable)
        let emptied = try SQLiteStore(path: path).load()
        XCTAssertTrue(emptied.definitions.isEmpty && emptied.values.isEmpty && emptied.bindings.isEmpty && emptied.commands.isEmpty, "\(emptied)")
        XCTAssertTrue(emptied.externalRevisions.isEmpty)

        let lazyPath = directory.appendingPathComponent("lazy.db").path
        let lazy = try SQLiteStore(path: lazyPath, createLazily: true)
        try lazy.commit(WriteSet(), durability: .full)
        XCTAssertFalse(FileManager.default.fileExists(atPath: lazyPath), "a round with nothing to write touches no disk")
    }

    func testStoreUsesWALWithFullSync() throws {
        _ = try SQLiteStore(path: path)
        let database = try SQLiteDatabase(path: path)
        XCTAssertEqual(try database.textRows("PRAGMA journal_mode"), ["wal"])
        XCTAssertEqual(try database.textRows("PRAGMA user_version"), ["\(SQLiteStore.schemaVersion)"])
    }

    func testCorruptFileFailsWithStoreFailedNamingTheFile() throws {
        try Data((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 7919) }).write(to: URL(fileURLWithPath: path))
        XCTAssertThrowsError(try SQLiteStore(path: path)) { error in
            let error = error as? PropBusError
            XCTAssertEqual(error?.code, .storeFailed)
            XCTAssertTrue(error?.message.contains(self.path) == true, error?.message ?? "")
        }
    }

    func testNewerSchemaIsRefused() throws {
        _ = try SQLiteStore(path: path)
        try SQLiteDatabase(path: path).execute("PRAGMA user_version = 99")
        XCTAssertThrowsError(try SQLiteStore(path: path)) { error in
            XCTAssertTrue((error as? PropBusError)?.message.contains("schema version 99") == true, "\(error)")
        }
    }

    func testMoveAsideKeepsEveryFile() throws {
        let store = try SQLiteStore(path: path)
        let model = try model(store)
        _ = try model.create(key: "app.a", type: "i", defaultValue: .int32(1))
        try model.commit(to: store)
        let moved = try SQLiteStore.moveAside(path, now: 0)
        XCTAssertTrue(moved.contains(path + ".corrupt-19700101T000000Z"), "\(moved)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: path))
        for file in moved { XCTAssertTrue(FileManager.default.fileExists(atPath: file)) }
    }

    // MARK: State directory

    func testStateDirectoryOrder() {
        XCTAssertEqual(StateDirectory.resolve(environment: ["STATE_DIRECTORY": "/run/sd:/other", "XDG_STATE_HOME": "/x"], option: "/opt", systemBus: false), "/run/sd")
        XCTAssertEqual(StateDirectory.resolve(environment: ["XDG_STATE_HOME": "/x"], option: "/opt", systemBus: false), "/opt")
        XCTAssertEqual(StateDirectory.resolve(environment: ["XDG_STATE_HOME": "/x"], option: nil, systemBus: false), "/x/propbus")
        XCTAssertEqual(StateDirectory.resolve(environment: ["HOME": "/home/u"], option: nil, systemBus: false), "/home/u/.local/state/propbus")
        XCTAssertEqual(StateDirectory.resolve(environment: ["XDG_STATE_HOME": "/x"], option: nil, systemBus: true), "/var/lib/propbus")
    }
}
