import DBusValues
import Foundation
import PropBus
import PropBusSystem
import XCTest

/// Bindings kept in the SQLite store (moved from ChannelTests, which needs no store).
final class BindingStoreTests: XCTestCase {
    /// A fresh directory for a store, removed when the test ends.
    private func storeDirectory(_ name: String) throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("propbus-\(name)-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(atPath: directory) }
        return directory
    }

    func testBindingIDsAreNotReusedAfterARestart() throws {
        let directory = try storeDirectory("ids")
        do {
            let store = try SQLiteStore(path: directory + "/propbus.db")
            let model = try PropertyModel(store: store)
            for key in ["i.a", "i.b"] { _ = try model.create(key: key, type: "i", defaultValue: .int32(0)) }
            _ = try model.bind(key: "i.a", to: "i.b", options: ["persistent": .boolean(true)], owner: ":1.1")
            _ = try model.bind(key: "i.b", to: "i.a", options: [:], owner: ":1.1")
            try model.commit(to: store)
        }
        let model = try PropertyModel(store: try SQLiteStore(path: directory + "/propbus.db"))
        XCTAssertEqual(model.bindings.all.map(\.id), [1])
        let next = try model.bind(key: "i.b", to: "i.a", options: [:], owner: ":1.2").binding
        XCTAssertEqual(next.id, 3, "id 2 belonged to a binding of the previous run")
    }

    func testAPersistentBindingKeepsItsPrincipalAcrossARestart() throws {
        let directory = try storeDirectory("principal")
        do {
            let store = try SQLiteStore(path: directory + "/propbus.db")
            let model = try PropertyModel(store: store)
            for key in ["i.a", "i.b", "i.c"] { _ = try model.create(key: key, type: "i", defaultValue: .int32(0)) }
            _ = try model.bind(key: "i.a", to: "i.b", options: ["persistent": .boolean(true)], owner: ":1.1", principal: 65534)
            _ = try model.bind(key: "i.c", to: "i.b", options: ["persistent": .boolean(true)], owner: nil)
            try model.commit(to: store)
        }
        let model = try PropertyModel(store: try SQLiteStore(path: directory + "/propbus.db"))
        XCTAssertEqual(model.bindings.all.map(\.principal), [65534, nil], "a model file's binding acts for the daemon")
        XCTAssertEqual(model.bindings.count(principal: 65534), 1)
        XCTAssertEqual(model.bindings.all.first?.options["principal"], .uint32(65534))
    }

    func testPropertiesAndCommandsKeepTheirCreatorAcrossARestart() throws {
        let directory = try storeDirectory("creator")
        do {
            let store = try SQLiteStore(path: directory + "/propbus.db")
            let model = try PropertyModel(store: store)
            _ = try model.create(key: "n.a", type: "s", defaultValue: .string(""), creator: 65534)
            _ = try model.create(key: "n.b", type: "i", defaultValue: .int32(0))
            _ = try model.set("n.a", to: .string("abc"))
            let commands = CommandTable(model: model)
            _ = try commands.create(key: "jobs.a", options: ["exec": .array(of: .string, [.string("true")])], creator: 65534)
            try model.commit(to: store)
        }
        let store = try SQLiteStore(path: directory + "/propbus.db")
        let loaded = try store.load()
        let model = PropertyModel(store: store, loaded: loaded)
        XCTAssertEqual(model.entry(for: try Key("n.a"))?.definition.creator, 65534)
        XCTAssertNil(model.entry(for: try Key("n.b"))?.definition.creator)
        XCTAssertEqual(model.usage.usage(of: 65534), [.properties: 1, .storedBytes: 8])
        let commands = CommandTable(model: model)
        XCTAssertEqual(commands.recreate(loaded.commands).count, 0)
        XCTAssertEqual(commands.definition(of: try Key("jobs.a"))?.creator, 65534)
        XCTAssertEqual(commands.usage.used(.commands, by: 65534), 1)
    }
}
