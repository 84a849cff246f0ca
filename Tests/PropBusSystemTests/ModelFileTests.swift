import DBusValues
import Foundation
import PropBus
import PropBusSystem
import XCTest

final class ModelFileTests: XCTestCase {
    private func load(_ text: String) throws -> ModelFile { try ModelFile(path: "test.json", text: text) }

    private func assertFails(_ text: String, containing pieces: [String], file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try load(text), file: file, line: line) { error in
            let message = (error as? PropBusError)?.message ?? "\(error)"
            XCTAssertTrue(message.hasPrefix("test.json:"), message, file: file, line: line)
            for piece in pieces { XCTAssertTrue(message.contains(piece), "\(message) lacks \(piece)", file: file, line: line) }
        }
    }

    func testASharedDefinitionIsDeclaredOnlyAsItIsAndItsValueIsLeftOut() throws {
        let model = try PropertyModel(store: MemoryStore())
        _ = try model.create(key: "f.level", type: "i", defaultValue: .int32(50), options: ["scope": .string("fleet")])
        model.commitRound()
        let commands = CommandTable(model: model, store: MemoryStore())
        // Shared when fleet-scoped; refused when the declaration's default is not 50.
        let shared = SharedDefinitions(contains: { $0.scope == .fleet },
                                       refusal: { $1.defaultValue == $0.defaultValue ? nil : "differs from the shared definition" })
        let same = try load(#"{"groups": {"f": {"properties": {"level": {"type": "i", "default": 50, "scope": "fleet", "value": 9}}}}}"#)
        _ = try same.apply(to: model, commands: commands, shared: shared)
        XCTAssertEqual(try model.value(of: "f.level"), .int32(50), "the file's value set a shared key")
        XCTAssertEqual(try model.entry("f.level").definition.source, "test.json")

        let other = try load(#"{"groups": {"f": {"properties": {"level": {"type": "i", "default": 70, "scope": "fleet"}}}}}"#)
        XCTAssertThrowsError(try other.apply(to: model, commands: commands, shared: shared)) { error in
            let message = (error as? PropBusError)?.message ?? "\(error)"
            XCTAssertTrue(message.hasPrefix("test.json:") && message.contains("f.level: differs from the shared definition"), message)
        }
        // Without the rule (no --fleet), a file's declaration applies as ever.
        model.rollbackRound()
        _ = try same.apply(to: model, commands: commands)
        XCTAssertEqual(try model.value(of: "f.level"), .int32(9))
    }

    /// A file that changes a local key's value (a new default, no stored value) must not carry
    /// that change through a binding (made by Bind, stored) into a shared key: that write would
    /// change the fleet key on this host only, outside any call, and never reach etcd.
    func testARedeclaredLocalKeyDoesNotDriveASharedKeyThroughABinding() throws {
        let model = try PropertyModel(store: MemoryStore())
        _ = try model.create(key: "f.level", type: "i", defaultValue: .int32(50), options: ["scope": .string("fleet")])
        _ = try model.create(key: "h.level", type: "i", defaultValue: .int32(50), options: ["source": .string("test.json")])
        _ = try model.bind(key: "h.level", to: "f.level", options: [:], owner: nil)
        model.commitRound()
        let commands = CommandTable(model: model, store: MemoryStore())
        let shared = SharedDefinitions(contains: { $0.scope == .fleet }, refusal: { _, _ in nil })

        let file = try load(#"{"groups": {"h": {"properties": {"level": {"type": "i", "default": 7}}}}}"#)
        _ = try file.apply(to: model, commands: commands, shared: shared)
        XCTAssertEqual(try model.value(of: "h.level"), .int32(7))
        XCTAssertEqual(try model.value(of: "f.level"), .int32(50), "the file's new default reached a shared key through a binding")
    }

    func testFlickrSearchExampleLoadsAndRegistersItsProperties() throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("examples/flickr-search.json").path
        let file = try ModelFile(contentsOf: path)
        let model = try PropertyModel(store: MemoryStore())
        _ = try file.apply(to: model, commands: CommandTable(model: model, store: MemoryStore()))
        XCTAssertEqual(try model.value(of: "viewmodel.title"), .string("Flickr Search"))
        XCTAssertFalse(try model.entry("viewmodel.title").definition.writable)
        XCTAssertFalse(try model.entry("viewmodel.searchText").definition.persistent)
        XCTAssertEqual(try model.value(of: "settings.someBoolKey"), .boolean(false))
        XCTAssertEqual(file.commands.map(\.key.text), ["viewmodel.executeSearch"])
    }

    func testAnUnreadableOrNonUTF8ModelFileIsRefusedWithTheReason() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("modelfile-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let missing = directory.appendingPathComponent("missing.json").path
        XCTAssertThrowsError(try ModelFile(contentsOf: missing)) { error in
            XCTAssertEqual((error as? PropBusError)?.message, "\(missing): cannot read the model file: No such file or directory")
        }
        let latin1 = directory.appendingPathComponent("latin1.json").path
        // "café" in Latin-1: the é is the lone byte E9.
        try Data(Array(#"{"groups": {}, "description": "caf"#.utf8) + [0xE9] + Array(#""}"#.utf8)).write(to: URL(fileURLWithPath: latin1))
        XCTAssertThrowsError(try ModelFile(contentsOf: latin1)) { error in
            XCTAssertEqual((error as? PropBusError)?.message, "\(latin1): cannot read the model file: it is not UTF-8 text")
        }
        XCTAssertEqual(ModelFile.files(in: directory.path), [latin1])
        XCTAssertEqual(ModelFile.files(in: missing), [])
    }

    func testValuesAreReadByTheDeclaredType() throws {
        let file = try load("""
            {"groups": {"ui": {"properties": {
              "tags": {"type": "as", "default": ["a", "b"]},
              "volume": {"type": "y", "default": 5, "minimum": 0, "maximum": 10},
              "opts": {"type": "a{sv}", "default": {"k": 1}}
            }}}}
            """)
        let model = try PropertyModel(store: MemoryStore())
        _ = try file.apply(to: model, commands: CommandTable(model: model, store: MemoryStore()))
        XCTAssertEqual(try model.value(of: "ui.tags"), .array(of: .string, [.string("a"), .string("b")]))
        XCTAssertEqual(try model.value(of: "ui.volume"), .byte(5))
        XCTAssertThrowsError(try model.set("ui.volume", to: .byte(11)))
    }

    func testErrorsNameTheFileTheKeyAndTheProblem() {
        assertFails(#"{"groups": {"a": {"properties": {"b": {"type": "zz"}}}}}"#, containing: ["a.b", "zz"])
        assertFails(#"{"groups": "#, containing: ["invalid JSON"])
        assertFails(#"{"groups": {"a": {"properties": {"b": {"type": "y", "default": 300}}}}}"#, containing: ["a.b", "default", "300"])
        assertFails(#"{"groups": {"a": {"properties": {"b": {"type": "s", "colour": 1}}}}}"#, containing: ["a.b", "colour"])
        assertFails(#"{"groups": {"a-b": {"properties": {"c": {"type": "s"}}}}}"#, containing: ["a-b.c", "'-'"])
        assertFails(#"{"groups": {"a": {"properties": {"b": {}}}}}"#, containing: ["a.b", "type"])
        assertFails(#"{"groups": {"a": {"commands": {"run": {"enabled_when": "length("}}}}}"#, containing: ["a.run", "enabled_when"])
        assertFails(#"{"bindings": [{"key": "a.b"}]}"#, containing: ["bindings[0]"])
        // Issue 26, defect 15: a command whose state keys (KEY.Executions) would pass 255 bytes.
        let name = String(repeating: "r", count: 250)
        assertFails(#"{"groups": {"a": {"commands": {"\#(name)": {"exec": ["true"]}}}}}"#, containing: ["a.\(name)", "a.\(name).Executions", "244"])
        assertFails(#"{"grops": {}}"#, containing: ["grops"])
    }

    func testApplyErrorsNameTheFileAndKey() throws {
        let file = try load(#"{"groups": {"a": {"properties": {"b": {"type": "i", "default": 50, "maximum": 10}}}}}"#)
        let model = try PropertyModel(store: MemoryStore())
        XCTAssertThrowsError(try file.apply(to: model, commands: CommandTable(model: model, store: MemoryStore()))) { error in
            let message = (error as? PropBusError)?.message ?? ""
            XCTAssertTrue(message.hasPrefix("test.json:") && message.contains(": a.b: "), message)
        }
    }

    func testDeclaredBindingsAreMade() throws {
        let file = try load("""
            {"groups": {"ui": {"properties": {"on": {"type": "b"}}}, "settings": {"properties": {"on": {"type": "b", "default": true}}}},
             "bindings": [{"key": "ui.on", "to": "settings.on"}]}
            """)
        let model = try PropertyModel(store: MemoryStore())
        _ = try file.apply(to: model, commands: CommandTable(model: model, store: MemoryStore()))
        XCTAssertEqual(try model.value(of: "ui.on"), .boolean(true))
        XCTAssertEqual(model.bindings.all.count, 1)
        XCTAssertFalse(model.bindings.all[0].persistent)
    }

    func testRedeclaringKeepsStoredValuesAcrossRestarts() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("propbus-model-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = try load(#"{"groups": {"s": {"properties": {"x": {"type": "i", "default": 1}}}}}"#)
        do {
            let store = try SQLiteStore(path: directory + "/propbus.db")
            let model = try PropertyModel(store: store)
            _ = try file.apply(to: model, commands: CommandTable(model: model, store: MemoryStore()))
            _ = try model.set("s.x", to: .int32(42))
            try store.commit()
        }
        let store = try SQLiteStore(path: directory + "/propbus.db")
        let model = try PropertyModel(store: store)
        _ = try file.apply(to: model, commands: CommandTable(model: model, store: MemoryStore()))
        XCTAssertEqual(try model.value(of: "s.x"), .int32(42))
    }
}
