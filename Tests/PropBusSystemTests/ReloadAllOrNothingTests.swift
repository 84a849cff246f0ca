import DBusValues
import XCTest
@testable import PropBus
@testable import PropBusModelFiles

/// A store that refuses the commit it is told to, and keeps nothing.
private final class RefusingCommitStore: PropertyStore {
    var refuseNextCommit = false
    func load() -> StoredState { StoredState() }
    func commit(_ writeSet: WriteSet, durability: StoreChanges.Durability) throws(PropBusError) {
        guard refuseNextCommit else { return }
        refuseNextCommit = false
        throw PropBusError(.storeFailed, "cannot commit: No space left on device")
    }
}

/// A reload is one transaction, a savepoint per file: when the store refuses its
/// commit, nothing of it stays, in the model, the command table, the bindings or the layer
/// files in force.
final class ReloadAllOrNothingTests: XCTestCase {
    private let modelPath = "/usr/share/propbus/models/app.json"
    private let siteFile = "/etc/propbus/defaults.d/10-site.json"
    private let lockFile = "/etc/propbus/mandatory.d/10-lock.json"

    private func layer(_ layer: ValueLayer, _ key: String, _ value: JSONValue, file: String) throws -> LayerEntry {
        LayerEntry(layer: layer, target: .key(try Key(key)), value: value, lockedFor: nil, source: file)
    }

    /// What the daemon's reload does: the model files, then the layer files, in one round
    /// that ends with the commit; a refused commit rolls the round and the files' bookkeeping back.
    private func reload(_ text: String, layers: LayerFileSet, files: ModelFileSet, model: PropertyModel, commands: CommandTable,
                        store: PropertyStore) throws -> Bool {
        let file = try ModelFile(path: modelPath, text: text)
        model.origin = .reload
        defer { model.origin = .daemon }
        _ = try files.load(files: [(modelPath, .success(file))], into: model, commands: commands, strict: false)
        _ = model.applyLayerFiles(layers)
        guard Round(model: model, commands: commands, store: store).end() != nil else { return true }
        files.rollbackLoad()
        return false
    }

    func testAReloadWhoseCommitFailsLeavesTheModelCommandsBindingsAndLayerFilesAsBefore() throws {
        let store = RefusingCommitStore()
        let model = try PropertyModel(store: store)
        let commands = CommandTable(model: model)
        let files = ModelFileSet()
        let first = #"""
            {"groups": {"app": {"properties": {"x": {"type": "i", "default": 1}, "y": {"type": "i", "default": 2},
                                                  "w": {"type": "i", "default": 2}},
                                "commands": {"run": {"exec": ["true"]}}}},
             "bindings": [{"key": "app.y", "to": "app.w"}]}
            """#
        let firstLayers = LayerFileSet(entries: [try layer(.site, "app.x", 5, file: siteFile)])
        XCTAssertTrue(try reload(first, layers: firstLayers, files: files, model: model, commands: commands, store: store))
        XCTAssertEqual(try model.value(of: "app.x"), .int32(5))
        let bindings = model.bindings.all.map(\.id)
        XCTAssertEqual(bindings.count, 1)
        let problems = model.layerProblems

        // The second reload drops y and w, the command and the binding, adds z, and changes the
        // layers (a lock on the new key); the disk is full.
        store.refuseNextCommit = true
        let second = #"{"groups": {"app": {"properties": {"x": {"type": "i", "default": 3}, "z": {"type": "s", "default": "new"}}}}}"#
        let secondLayers = LayerFileSet(entries: [try layer(.site, "app.x", 9, file: siteFile), try layer(.mandatory, "app.z", "locked", file: lockFile)])
        XCTAssertFalse(try reload(second, layers: secondLayers, files: files, model: model, commands: commands, store: store))

        XCTAssertEqual(try model.value(of: "app.x"), .int32(5), "the layer value and default in force before the reload")
        XCTAssertEqual(try model.entry("app.x").definition.defaultValue, .int32(1))
        XCTAssertNotNil(model.entry(for: try Key("app.y")), "a key the reload retired is back")
        XCTAssertNil(model.entry(for: try Key("app.z")), "a key the reload created is gone")
        XCTAssertNotNil(commands.definition(of: try Key("app.run")), "the command the reload deleted is back")
        XCTAssertEqual(model.bindings.all.map(\.id), bindings, "the binding the reload unmade is back")
        XCTAssertEqual(model.layerFiles, firstLayers, "the layer files in force are those before the reload")
        XCTAssertEqual(model.layerProblems, problems)

        // The layer files in force are the old ones: a key created now takes its layers from them.
        _ = try model.create(key: "app.z", type: "s", defaultValue: .string("later"))
        XCTAssertEqual(try model.value(of: "app.z"), .string("later"), "no lock from the refused reload's layer files")
        XCTAssertNil(try model.entry("app.z").layers)

        // The same reload, once the disk has room, applies as a whole.
        model.commitRound()
        _ = try model.delete(key: "app.z")
        XCTAssertTrue(try reload(second, layers: secondLayers, files: files, model: model, commands: commands, store: store))
        XCTAssertEqual(try model.value(of: "app.x"), .int32(9))
        XCTAssertEqual(try model.value(of: "app.z"), .string("locked"))
        XCTAssertNil(commands.definition(of: try Key("app.run")))
        XCTAssertTrue(model.bindings.all.isEmpty)
        XCTAssertEqual(model.layerFiles, secondLayers)
    }

    /// A reload is a savepoint inside the round, not a commit: a Set made earlier in the same
    /// round (a client's call dispatched before the Reload) goes back with the reload when the
    /// store refuses the round (the load forgot what came before it, which stayed applied).
    func testARefusedReloadAlsoTakesBackTheRoundsEarlierWrites() throws {
        let store = RefusingCommitStore()
        let model = try PropertyModel(store: store)
        let commands = CommandTable(model: model)
        let files = ModelFileSet()
        let text = #"{"groups": {"app": {"properties": {"x": {"type": "i", "default": 1}}}}}"#
        XCTAssertTrue(try reload(text, layers: LayerFileSet(), files: files, model: model, commands: commands, store: store))
        _ = try model.set("app.x", to: .int32(7))
        let revision = model.revision
        store.refuseNextCommit = true
        let second = #"{"groups": {"app": {"properties": {"x": {"type": "i", "default": 1}, "y": {"type": "i", "default": 2}}}}}"#
        XCTAssertFalse(try reload(second, layers: LayerFileSet(), files: files, model: model, commands: commands, store: store))
        XCTAssertEqual(try model.value(of: "app.x"), .int32(1), "the Set the store never recorded is gone with the round")
        XCTAssertNil(model.entry(for: try Key("app.y")))
        XCTAssertLessThan(model.revision, revision, "the round's revisions were never recorded")
    }
}
