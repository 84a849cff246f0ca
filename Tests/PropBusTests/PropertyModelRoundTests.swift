import DBusValues
import XCTest

@testable import PropBus

/// A store whose commit fails when asked to, as a full disk would.
final class FailingStore: PropertyStore {
    var failNextCommit = false
    private(set) var committedValues: [Key: DBusValue] = [:]

    func load() -> StoredState { StoredState() }
    func commit(_ writeSet: WriteSet, durability: StoreChanges.Durability) throws(PropBusError) {
        if failNextCommit {
            failNextCommit = false
            throw PropBusError(.storeFailed, "cannot commit: No space left on device")
        }
        for (key, write) in writeSet.store.values {
            switch write {
            case .save(let stored): committedValues[key] = stored.value
            case .delete: committedValues[key] = nil
            }
        }
    }
}

final class PropertyModelRoundTests: XCTestCase {
    private let store = FailingStore()

    /// Ends the round as the service does, through ``Round``; whether it committed.
    private func endRound(_ model: PropertyModel) -> Bool {
        Round(model: model, commands: nil, store: store).end() == nil
    }

    func testFailedCommitRestoresValuesRevisionsAndDefinitions() throws {
        let model = try PropertyModel(store: store)
        _ = try model.create(key: "app.a", type: "i", defaultValue: .int32(1))
        _ = try model.create(key: "app.b", type: "s", defaultValue: .string("b"))
        _ = try model.set("app.b", to: .string("kept"))
        XCTAssertTrue(endRound(model))
        let before = (model.revision, try model.entry("app.a").revision, try model.entry("app.b").revision)

        _ = try model.set("app.a", to: .int32(2))
        _ = try model.set("app.a", to: .int32(3))
        _ = try model.reset("app.b")
        _ = try model.delete(key: "app.b")
        _ = try model.create(key: "other.c", type: "b", defaultValue: .boolean(true))
        store.failNextCommit = true
        XCTAssertFalse(endRound(model))

        XCTAssertEqual(try model.value(of: "app.a"), .int32(1))
        XCTAssertEqual(try model.value(of: "app.b"), .string("kept"))
        XCTAssertThrowsError(try model.entry("other.c"))
        XCTAssertEqual(model.groupNames, ["app"])
        XCTAssertEqual(model.names(inGroup: "app"), ["a", "b"])
        XCTAssertEqual((model.revision, try model.entry("app.a").revision, try model.entry("app.b").revision).0, before.0)
        XCTAssertEqual(try model.entry("app.a").revision, before.1)
        XCTAssertEqual(try model.entry("app.b").revision, before.2)
        XCTAssertEqual(store.committedValues[try Key("app.b")], .string("kept"))
    }

    func testRoundAfterAFailedOneStartsFromTheRestoredState() throws {
        let model = try PropertyModel(store: store)
        _ = try model.create(key: "app.a", type: "i", defaultValue: .int32(1))
        XCTAssertTrue(endRound(model))
        _ = try model.set("app.a", to: .int32(2))
        store.failNextCommit = true
        XCTAssertFalse(endRound(model))

        let changes = try model.set("app.a", to: .int32(2))
        XCTAssertEqual(changes, [.valueChanged(try Key("app.a"), old: .int32(1))], "the lost write is a change again")
        XCTAssertTrue(endRound(model))
        XCTAssertEqual(store.committedValues[try Key("app.a")], .int32(2))
        // Nothing of the failed round lingers in the undo log.
        store.failNextCommit = true
        _ = try model.set("app.a", to: .int32(9))
        XCTAssertFalse(endRound(model))
        XCTAssertEqual(try model.value(of: "app.a"), .int32(2))
    }

    func testCommittedRoundsAreNotUndone() throws {
        let model = try PropertyModel(store: store)
        _ = try model.create(key: "app.a", type: "i", defaultValue: .int32(1))
        _ = try model.set("app.a", to: .int32(5))
        XCTAssertTrue(endRound(model))
        XCTAssertEqual(model.rollbackRound(), [])
        XCTAssertEqual(try model.value(of: "app.a"), .int32(5))
    }

    func testARoundReportsItsWriteSetAndUndoesItWhenTheStoreRefuses() throws {
        let model = try PropertyModel(store: store)
        let round = Round(model: model, commands: nil, store: store)
        _ = try model.create(key: "app.a", type: "i", defaultValue: .int32(1))
        _ = try model.create(key: "app.b", type: "i", defaultValue: .int32(1))
        XCTAssertEqual(round.writtenKeys, [try Key("app.a"), try Key("app.b")])
        XCTAssertNil(round.end())
        XCTAssertEqual(round.writtenKeys, [], "a committed round leaves nothing for the next")

        _ = try model.set("app.a", to: .int32(5))
        XCTAssertEqual(round.writtenKeys, [try Key("app.a")], "the write set is what the round changed, not what exists")
        store.failNextCommit = true
        let rollback = try XCTUnwrap(round.end(), "the store refused: the round must say so")
        XCTAssertEqual(rollback.error.code, .storeFailed)
        XCTAssertEqual(rollback.touchedKeys, [try Key("app.a")])
        XCTAssertEqual(try model.value(of: "app.a"), .int32(1))
        XCTAssertEqual(round.writtenKeys, [])
        XCTAssertEqual(store.committedValues[try Key("app.a")], nil, "the refused write never reached the store")
    }

    func testARoundRecordsTheKeysItsTransformsRead() throws {
        let model = try PropertyModel(store: store)
        let round = Round(model: model, commands: nil, store: store)
        _ = try model.create(key: "a.x", type: "i", defaultValue: .int32(0))
        _ = try model.create(key: "b.y", type: "i", defaultValue: .int32(0))
        _ = try model.create(key: "c.z", type: "i", defaultValue: .int32(10))
        _ = try model.bind(key: "b.y", to: "a.x", options: ["to_key": .string("value + c.z")], owner: ":1.1")
        XCTAssertNil(round.end())
        XCTAssertEqual(round.readKeys, [])

        _ = try model.set("a.x", to: .int32(1))
        XCTAssertEqual(try model.value(of: "b.y"), .int32(11))
        XCTAssertTrue(round.readKeys.contains(try Key("c.z")), "the transform read c.z: \(round.readKeys)")
        XCTAssertEqual(round.writtenKeys, [try Key("a.x"), try Key("b.y")])
        XCTAssertNil(round.end())
        XCTAssertEqual(round.readKeys, [], "the next round starts with an empty read set")
    }
}
