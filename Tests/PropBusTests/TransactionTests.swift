import DBusValues
import XCTest

@testable import PropBus

/// The round's one journal (``Transaction``): the round is the outer level, a savepoint
/// (a call, a model file) a level inside it, and savepoints nest. Rolling back to one puts
/// back what was before it, in every part the model keeps (entries, unclaimed values,
/// bindings, leases, rows to store, revision, keys read, the open change's keys); releasing
/// one hands its writes to the level around it.
final class TransactionTests: XCTestCase {
    private func model() throws -> PropertyModel {
        let model = try PropertyModel(store: MemoryStore())
        for name in ["one", "two", "three"] { _ = try model.create(key: "a.\(name)", type: "i", defaultValue: .int32(0)) }
        model.commitRound()
        model.endWriteSet()
        return model
    }

    private func value(_ model: PropertyModel, _ key: String) throws -> Int32? {
        if case .int32(let value) = try model.value(of: key) { value } else { nil }
    }

    func testRollingBackAnInnerSavepointKeepsTheOuterLevelsWrites() throws {
        let model = try model()
        _ = try model.set("a.one", to: .int32(1))
        let outer = model.savepoint()
        _ = try model.set("a.one", to: .int32(2))
        _ = try model.set("a.two", to: .int32(2))
        let revisionAtInner = model.revision
        let inner = model.savepoint()
        _ = try model.set("a.one", to: .int32(3))
        _ = try model.set("a.three", to: .int32(3))
        XCTAssertEqual(model.changes(since: inner).before.keys.sorted(), [try Key("a.one"), try Key("a.three")])
        XCTAssertEqual(model.changes(since: inner).before[try Key("a.one")]??.value, .int32(2), "the state when the inner level began")

        model.rollback(to: inner)
        XCTAssertEqual(try [value(model, "a.one"), value(model, "a.two"), value(model, "a.three")], [2, 2, 0])
        XCTAssertEqual(model.revision, revisionAtInner)
        XCTAssertEqual(model.changes(since: outer).before[try Key("a.one")]??.value, .int32(1), "the outer level's journal is intact")

        model.rollback(to: outer)
        XCTAssertEqual(try [value(model, "a.one"), value(model, "a.two"), value(model, "a.three")], [1, 0, 0])
        XCTAssertEqual(model.keysChangedThisRound, [try Key("a.one")], "the round still holds its own write, and only that")

        model.rollbackRound()
        XCTAssertEqual(try value(model, "a.one"), 0)
        XCTAssertEqual(model.keysChangedThisRound, [])
    }

    func testReleasingASavepointHandsItsWritesToTheLevelAroundIt() throws {
        let model = try model()
        let revision = model.revision
        let outer = model.savepoint()
        _ = try model.set("a.one", to: .int32(1))
        let inner = model.savepoint()
        _ = try model.set("a.one", to: .int32(2))
        _ = try model.set("a.two", to: .int32(2))
        model.release(inner)
        XCTAssertEqual(model.changes(since: outer).before.keys.sorted(), [try Key("a.one"), try Key("a.two")])
        XCTAssertEqual(model.changes(since: outer).before[try Key("a.one")]??.value, .int32(0), "the state when the outer level began")

        model.rollback(to: outer)
        XCTAssertEqual(try [value(model, "a.one"), value(model, "a.two")], [0, 0], "the released level's writes went with the outer one")
        XCTAssertEqual(model.revision, revision)
        XCTAssertEqual(model.keysChangedThisRound, [])
        XCTAssertTrue(model.takeWriteSet().isEmpty)
    }

    /// A key written in the round, then again in a savepoint that is released, is one entry of
    /// the round's write set: its state before the round, its state after both.
    func testAKeyWrittenInBothLevelsIsOneChangeFromTheRoundsBeforeToItsLastAfter() throws {
        let model = try model()
        _ = try model.set("a.one", to: .int32(1))
        let call = model.savepoint()
        _ = try model.set("a.one", to: .int32(2))
        XCTAssertEqual(model.changes(since: call).before[try Key("a.one")]??.value, .int32(1))
        model.release(call)
        let entries = model.takeWriteSet().changes.flatMap(\.entries)
        XCTAssertEqual(entries.map(\.key), [try Key("a.one")])
        XCTAssertEqual(entries.first?.before?.value, .int32(0))
        XCTAssertEqual(entries.first?.after?.value, .int32(2))
        model.rollbackRound()
        XCTAssertEqual(try value(model, "a.one"), 0)
    }

    /// Rolling back to an outer savepoint ends the inner ones too; the round goes on.
    func testRollingBackToAnOuterSavepointEndsTheInnerOnes() throws {
        let model = try model()
        let outer = model.savepoint()
        _ = try model.set("a.one", to: .int32(1))
        _ = model.savepoint()
        _ = try model.set("a.two", to: .int32(2))
        model.rollback(to: outer)
        XCTAssertEqual(try [value(model, "a.one"), value(model, "a.two")], [0, 0])
        let next = model.savepoint()
        _ = try model.set("a.three", to: .int32(3))
        model.release(next)
        XCTAssertEqual(model.keysChangedThisRound, [try Key("a.three")])
    }

    /// A call rolled back leaves the round's write set; the origin's earlier keys stay in it.
    func testARolledBackSavepointsKeysLeaveTheOpenChange() throws {
        let model = try model()
        model.origin = .reload
        _ = try model.set("a.one", to: .int32(1))
        let call = model.savepoint()
        _ = try model.set("a.two", to: .int32(2))
        model.rollback(to: call)
        _ = try model.set("a.three", to: .int32(3))
        let changes = model.takeWriteSet().changes
        XCTAssertEqual(changes.map(\.origin), [.reload])
        XCTAssertEqual(changes.flatMap(\.entries).map(\.key), [try Key("a.one"), try Key("a.three")])
    }

    /// Bindings, leases, unclaimed values, the rows to store and the keys read are the
    /// savepoint's too.
    func testRollingBackASavepointTakesBackBindingsLeasesUnclaimedValuesRowsAndReads() throws {
        let store = MemoryStore()
        let model = try PropertyModel(store: store)
        _ = try model.create(key: "a.one", type: "i", defaultValue: .int32(0))
        _ = try model.create(key: "a.two", type: "i", defaultValue: .int32(0))
        _ = try model.create(key: "a.gone", type: "i", defaultValue: .int32(0), options: ["value": .int32(4)])
        model.commitRound()
        let before = model.storeChanges
        let call = model.savepoint()
        _ = try model.bind(key: "a.two", to: "a.one", options: ["to_key": .string("value + 1")], owner: nil)
        _ = try model.set("a.one", to: .int32(5))
        XCTAssertFalse(model.keysReadThisRound.isEmpty, "the binding read a.one")
        _ = model.retire(try Key("a.gone"))
        XCTAssertEqual(model.unclaimed.map(\.key), [try Key("a.gone")])
        let (handle, _) = try model.override("a.one", with: .int32(9), holder: LeaseHolder(busName: ":1.1"), now: 0, expires: 10)
        XCTAssertNotNil(model.override(handle))

        model.rollback(to: call)
        XCTAssertTrue(model.bindings.isEmpty)
        XCTAssertTrue(model.leases.isEmpty)
        XCTAssertNil(model.override(handle))
        XCTAssertEqual(model.unclaimed.map(\.key), [])
        XCTAssertEqual(try value(model, "a.gone"), 4)
        XCTAssertEqual(try [value(model, "a.one"), value(model, "a.two")], [0, 0])
        XCTAssertEqual(model.keysReadThisRound, [])
        XCTAssertEqual(model.storeChanges.bindings.count, before.bindings.count)
        XCTAssertEqual(model.storeChanges.leases.count, before.leases.count)
        XCTAssertEqual(model.storeChanges.values.count, before.values.count)
    }
}
