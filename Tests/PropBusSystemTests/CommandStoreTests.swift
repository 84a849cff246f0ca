import DBusValues
import Foundation
import PropBusModelFiles
import XCTest

@testable import PropBus
@testable import PropBusSystem

/// Commands in the SQLite store (schema v3) and in model files.
final class CommandStoreTests: XCTestCase {
    private var directory: URL!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("propbus-commands-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: directory)
    }

    private var path: String { directory.appendingPathComponent(SQLiteStore.fileName).path }

    private static let argv = DBusValue.array(of: .string, [.string("/bin/echo"), .string("hi")])

    /// A model and a command table over the store at `path`, as the daemon opens them.
    private func open() throws -> (SQLiteStore, PropertyModel, CommandTable) {
        let store = try SQLiteStore(path: path)
        let model = try PropertyModel(store: store)
        return (store, model, CommandTable(model: model))
    }

    private func commit(_ store: SQLiteStore, _ model: PropertyModel, _ table: CommandTable) throws {
        if let rollback = Round(model: model, commands: table, store: store).end() { throw rollback.error }
    }

    private func storedKeys(_ store: SQLiteStore) throws -> [String] { try store.load().commands.map(\.key.text) }

    // MARK: Persistence

    func testPersistentCommandComesBackAfterReopening() throws {
        let options: [String: DBusValue] = [
            "exec": Self.argv, "enabled_when": .string("length(vm.text) > 3"), "concurrent": .boolean(true),
            "timeout": .double(2.5), "description": .string("Search"), "writers": .array(of: .string, [.string("@wheel")]),
        ]
        let created: CommandDefinition
        do {
            let (store, model, table) = try open()
            _ = try model.create(key: "vm.text", type: "s", defaultValue: .string(""))
            _ = try table.create(key: "vm.search", options: options)
            created = try XCTUnwrap(table.definition(of: try Key("vm.search")))
            try commit(store, model, table)
        }
        let (store, model, table) = try open()
        XCTAssertEqual(try storedKeys(store), ["vm.search"])
        XCTAssertThrowsError(try model.entry("vm.search.Enabled"), "state keys are transient: not stored")
        let stored = try XCTUnwrap(try store.load().commands.first)
        XCTAssertEqual(try CommandDefinition(key: stored.key, options: stored.options), created)
        // The daemon recreates it from the stored options.
        _ = try table.create(key: stored.key.text, options: stored.options)
        XCTAssertEqual(table.definition(of: stored.key), created)
        XCTAssertEqual(try model.value(of: "vm.search.Enabled"), .boolean(false))
    }

    func testACommandsCreatorIsStoredAsItsPrincipalAndComesBack() throws {
        do {
            let (store, model, table) = try open()
            _ = try table.create(key: "vm.search", options: ["exec": Self.argv], creator: 1000)
            try commit(store, model, table)
        }
        let (store, _, table) = try open()
        let stored = try XCTUnwrap(try store.load().commands.first)
        XCTAssertEqual(table.recreate([stored]).count, 0)
        XCTAssertEqual(table.definition(of: try Key("vm.search"))?.creator, 1000)
        XCTAssertThrowsError(try CommandDefinition(key: stored.key, options: ["exec": Self.argv, "creator": .uint32(0)]),
                             "a client may not name the creator")
    }

    func testTransientCommandIsNotStored() throws {
        do {
            let (store, model, table) = try open()
            _ = try table.create(key: "vm.search", options: ["exec": Self.argv, "persistent": .boolean(false)])
            _ = try table.create(key: "vm.kept", options: ["handler": .boolean(true)])
            try commit(store, model, table)
        }
        XCTAssertEqual(try storedKeys(try open().0), ["vm.kept"])
    }

    func testRedefiningAsTransientForgetsTheStoredDefinition() throws {
        do {
            let (store, model, table) = try open()
            _ = try table.create(key: "vm.search", options: ["exec": Self.argv])
            try commit(store, model, table)
            _ = try table.create(key: "vm.search", options: ["exec": Self.argv, "persistent": .boolean(false)])
            try commit(store, model, table)
        }
        XCTAssertEqual(try storedKeys(try open().0), [])
    }

    func testDeletedCommandStaysDeleted() throws {
        do {
            let (store, model, table) = try open()
            _ = try table.create(key: "vm.search", options: ["exec": Self.argv])
            _ = try table.create(key: "vm.other", options: ["exec": Self.argv])
            try commit(store, model, table)
            _ = try table.delete(key: "vm.search")
            try commit(store, model, table)
        }
        XCTAssertEqual(try storedKeys(try open().0), ["vm.other"])
    }

    func testUncommittedCommandIsNotStored() throws {
        do {
            let (store, model, table) = try open()
            _ = try table.create(key: "vm.search", options: ["exec": Self.argv])
            model.rollbackRound()
            _ = table.rollbackRound()
            try commit(store, model, table)
        }
        XCTAssertEqual(try storedKeys(try open().0), [])
    }

    /// At startup the daemon recreates stored commands (`CommandTable.recreate`); a command whose
    /// predicate reads another command's state comes back whatever the key order.
    func testStoredCommandsReadingAnotherCommandsStateAreRecreated() throws {
        do {
            let (store, model, table) = try open()
            _ = try model.create(key: "z.text", type: "s", defaultValue: .string(""))
            _ = try table.create(key: "c.load", options: ["exec": Self.argv])
            _ = try table.create(key: "b.check", options: ["exec": Self.argv, "enabled_when": .string("!c.load.Executing")])
            _ = try table.create(key: "a.save", options: ["exec": Self.argv, "enabled_when": .string("b.check.Enabled")])
            _ = try table.create(key: "d.lost", options: ["exec": Self.argv, "enabled_when": .string("z.text == \"\"")])
            try commit(store, model, table)
            _ = try model.delete(key: "z.text")
            try commit(store, model, table)
        }
        let (store, model, table) = try open()
        XCTAssertEqual(try storedKeys(store), ["a.save", "b.check", "c.load", "d.lost"])
        let failures = table.recreate(try store.load().commands)
        XCTAssertEqual(failures.map(\.key.text), ["d.lost"], "only the command whose key is gone is left out")
        XCTAssertEqual(failures.first?.error.code, .unknownKey)
        XCTAssertEqual(table.definitions.map(\.key.text), ["a.save", "b.check", "c.load"])
        XCTAssertEqual(try model.value(of: "a.save.Enabled"), .boolean(true))
        // The recreated predicates are watched again, along the chain.
        let accepted = try table.accept("c.load", input: .string(""))
        _ = table.refresh(after: accepted.changes)
        XCTAssertEqual(try model.value(of: "b.check.Enabled"), .boolean(false))
        XCTAssertEqual(try model.value(of: "a.save.Enabled"), .boolean(false))
        _ = table.refresh(after: table.finish(accepted.execution.id, of: accepted.execution.command))
        XCTAssertEqual(try model.value(of: "a.save.Enabled"), .boolean(true))
    }

    // MARK: Schema

    func testNewStoreHasSchemaVersion6WithCommandsFleetHistoryAndLeasesTables() throws {
        _ = try SQLiteStore(path: path)
        let database = try SQLiteDatabase(path: path)
        XCTAssertEqual(SQLiteStore.schemaVersion, 12)
        XCTAssertEqual(try database.textRows("PRAGMA user_version"), ["12"])
        XCTAssertEqual(try database.textRows("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"),
                       ["bindings", "commands", "definitions", "fleet_keys", "history", "history_by_change", "history_by_uid", "history_caller", "history_denied",
                        "history_index", "history_key", "leases", "meta", "stored_values"])
    }

    func testVersion2StoreIsMigratedKeepingItsData() throws {
        // A v2 store: everything but the commands table.
        do {
            let store = try SQLiteStore(path: path)
            let model = try PropertyModel(store: store)
            _ = try model.create(key: "app.volume", type: "d", defaultValue: .double(0.5))
            _ = try model.set("app.volume", to: .double(0.25))
            try model.commit(to: store)
        }
        do {
            let database = try SQLiteDatabase(path: path)
            try database.execute("DROP TABLE commands")
            try database.execute("DROP TABLE fleet_keys")
            try database.execute("DROP TABLE history")
            try database.execute("DROP TABLE leases")
            try database.execute("DROP TABLE history_denied")
            try database.execute("DROP TABLE history_caller")
            try database.execute("DROP TABLE history_key")
            try database.execute("DROP TABLE history_index")
            try database.execute("DROP TABLE history_by_change")
            try database.execute("DROP TABLE history_by_uid")
            try database.execute("PRAGMA user_version = 2")
        }
        do {
            let (store, model, table) = try open()
            XCTAssertEqual(try model.value(of: "app.volume"), .double(0.25))
            XCTAssertEqual(try storedKeys(store), [])
            _ = try table.create(key: "app.run", options: ["exec": Self.argv])
            try commit(store, model, table)
        }
        XCTAssertEqual(try SQLiteDatabase(path: path).textRows("PRAGMA user_version"), ["\(SQLiteStore.schemaVersion)"])
        let (store, model, _) = try open()
        XCTAssertEqual(try storedKeys(store), ["app.run"])
        XCTAssertEqual(try model.value(of: "app.volume"), .double(0.25))
    }

    func testUnreadableStoredCommandIsStoreFailedNamingIt() throws {
        _ = try SQLiteStore(path: path)
        try SQLiteDatabase(path: path).execute("INSERT INTO commands (key, options) VALUES ('vm.search', x'00ff')")
        XCTAssertThrowsError(try open()) { error in
            let error = error as? PropBusError
            XCTAssertEqual(error?.code, .storeFailed)
            XCTAssertTrue(error?.message.contains("vm.search") == true, error?.message ?? "")
        }
    }

    // MARK: Model files

    func testModelFileCreatesPropertiesThenCommandsThenBindingsOnTheirState() throws {
        let file = try ModelFile(path: "/srv/models/search.json", text: """
            {"groups": {
               "vm": {"properties": {"text": {"type": "s", "persistent": false}},
                      "commands": {"search": {"exec": ["./search.sh", "--json"], "enabled_when": "length(vm.text) > 3",
                                              "timeout": 30, "persistent": false, "description": "Search"},
                                   "serve": {"handler": true, "concurrent": true}}},
               "ui": {"properties": {"activity": {"type": "b"}}}},
             "bindings": [{"key": "ui.activity", "to": "vm.search.Executing", "direction": "from"}]}
            """)
        let model = try PropertyModel(store: MemoryStore())
        let table = CommandTable(model: model)
        _ = try file.apply(to: model, commands: table)

        let search = try XCTUnwrap(table.definition(of: try Key("vm.search")))
        XCTAssertEqual(search.work, .exec(["/srv/models/search.sh", "--json"]), "./x is beside the model file")
        XCTAssertEqual(search.enabledWhen?.text, "length(vm.text) > 3")
        XCTAssertEqual(search.timeout, 30)
        XCTAssertFalse(search.persistent)
        XCTAssertEqual(search.description, "Search")
        let serve = try XCTUnwrap(table.definition(of: try Key("vm.serve")))
        XCTAssertEqual(serve.work, .handler)
        XCTAssertTrue(serve.concurrent)

        XCTAssertEqual(model.bindings.all.count, 1)
        XCTAssertEqual(try model.value(of: "vm.search.Enabled"), .boolean(false))
        let changes = try model.set("vm.text", to: .string("cats!"))
        _ = table.refresh(after: changes)
        let execution = try table.accept("vm.search", input: .string("cats!")).execution
        XCTAssertEqual(try model.value(of: "ui.activity"), .boolean(true))
        _ = table.finish(execution.id, of: execution.command)
        XCTAssertEqual(try model.value(of: "ui.activity"), .boolean(false))
    }

    func testModelFileExecPaths() throws {
        func argv0(_ modelPath: String, _ program: String) throws -> String? {
            let file = try ModelFile(path: modelPath, text: #"{"groups": {"a": {"commands": {"run": {"exec": ["\#(program)"]}}}}}"#)
            guard case .exec(let argv) = try CommandDefinition(key: try Key("a.run"), options: file.commands[0].options).work else { return nil }
            return argv.first
        }
        XCTAssertEqual(try argv0("/etc/propbus/models/a.json", "./run.sh"), "/etc/propbus/models/run.sh")
        XCTAssertEqual(try argv0("/etc/propbus/models/a.json", "../bin/run.sh"), "/etc/propbus/models/../bin/run.sh")
        XCTAssertEqual(try argv0("/etc/propbus/models/a.json", "/usr/bin/run"), "/usr/bin/run", "absolute: unchanged")
        XCTAssertEqual(try argv0("/etc/propbus/models/a.json", "curl"), "curl", "a bare name is looked up in PATH")
        XCTAssertEqual(try argv0("a.json", "./run.sh"), FileManager.default.currentDirectoryPath + "/run.sh",
                       "a relative model file: made absolute, since a stored command outlives the working directory")
    }

    func testModelFileCommandErrorsNameTheFileAndTheCommand() throws {
        for (text, piece) in [
            (#"{"groups": {"a": {"commands": {"run": {}}}}}"#, "exec"),
            (#"{"groups": {"a": {"commands": {"run": {"exec": []}}}}}"#, "exec"),
            (#"{"groups": {"a": {"commands": {"run": {"exec": ["x"], "handler": true}}}}}"#, "exec"),
            (#"{"groups": {"a": {"commands": {"run": {"exec": ["x"], "timeout": 0}}}}}"#, "timeout"),
            (#"{"groups": {"a": {"commands": {"run": {"exec": ["x"], "colour": 1}}}}}"#, "colour"),
        ] {
            XCTAssertThrowsError(try ModelFile(path: "m.json", text: text), text) { error in
                let message = (error as? PropBusError)?.message ?? "\(error)"
                XCTAssertTrue(message.hasPrefix("m.json:") && message.contains(": a.run"), message)
                XCTAssertTrue(message.contains(piece), message)
            }
        }
        // Checked only when applied: the predicate's keys and type.
        let file = try ModelFile(path: "m.json", text: #"{"groups": {"a": {"commands": {"run": {"exec": ["x"], "enabled_when": "a.missing"}}}}}"#)
        let model = try PropertyModel(store: MemoryStore())
        XCTAssertThrowsError(try file.apply(to: model, commands: CommandTable(model: model))) { error in
            let message = (error as? PropBusError)?.message ?? "\(error)"
            XCTAssertTrue(message.hasPrefix("m.json:") && message.contains(": a.run"), message)
            XCTAssertTrue(message.contains("a.missing"), message)
        }
    }
}
