import DBusValues
import XCTest

@testable import PropBus

/// A savepoint inside the round (``PropertyModel/savepoint()``): the fleet takes one call's writes
/// of fleet keys back out of the round, sends them to etcd, and puts the result back with
/// ``PropertyModel/apply(after:)``; ``PropertyModel/apply(remote:holding:)`` applies what other
/// hosts wrote.
final class PropertyModelCallTests: XCTestCase {
    private let store = FailingStore()

    private func model() throws -> PropertyModel {
        let model = try PropertyModel(store: store)
        _ = try model.create(key: "a.one", type: "i", defaultValue: .int32(0))
        _ = try model.create(key: "a.two", type: "i", defaultValue: .int32(0))
        _ = try model.create(key: "a.local", type: "i", defaultValue: .int32(0))
        model.commitRound()
        return model
    }

    func testRollingBackACallKeepsTheRoundsEarlierWritesAndUndoesTheCallsOwn() throws {
        let model = try model()
        _ = try model.set("a.one", to: .int32(1))
        let revisionBefore = model.revision
        let call = model.savepoint()
        _ = try model.set("a.one", to: .int32(2))
        _ = try model.set("a.two", to: .int32(3))
        let (before, _) = model.changes(since: call)
        XCTAssertEqual(Set(before.keys), [try Key("a.one"), try Key("a.two")])
        XCTAssertEqual(before[try Key("a.one")]??.value, .int32(1), "the state when the call began, not the round's")
        model.rollback(to: call)
        XCTAssertEqual(try model.value(of: "a.one"), .int32(1))
        XCTAssertEqual(try model.value(of: "a.two"), .int32(0))
        XCTAssertEqual(model.revision, revisionBefore)
        // The round still holds a.one's write, and only that.
        XCTAssertEqual(model.keysChangedThisRound, [try Key("a.one")])
        model.rollbackRound()
        XCTAssertEqual(try model.value(of: "a.one"), .int32(0))
    }

    func testApplyingAfterImagesPutsBackWhatTheCallComputedWithANewRevision() throws {
        let model = try model()
        let call = model.savepoint()
        _ = try model.create(key: "a.new", type: "s", defaultValue: .string("x"), options: ["value": .string("y")])
        _ = try model.set("a.one", to: .int32(5))
        let key = try Key("a.new"), one = try Key("a.one")
        let after = (model.entry(for: key), model.entry(for: one))
        model.rollback(to: call)
        XCTAssertNil(model.entry(for: key))
        let changes = model.apply(after: [key: after.0, one: after.1])
        XCTAssertEqual(changes, [.created(key), .valueChanged(one, old: .int32(0))])
        XCTAssertEqual(try model.value(of: "a.new"), .string("y"))
        XCTAssertEqual(try model.entry("a.one").revision, model.revision)
        XCTAssertEqual(model.apply(after: [one: model.entry(for: one)]), [], "the same state again changes nothing")
        XCTAssertEqual(model.apply(after: [key: PropertyModel.Entry?.none]), [.deleted(key, old: .string("y"))])
    }

    func testRemoteValuesSpreadToLocalKeysButNotIntoHeldOnes() throws {
        let model = try model()
        _ = try model.bind(key: "a.local", to: "a.one", options: [:], owner: nil)
        _ = try model.bind(key: "a.two", to: "a.one", options: [:], owner: nil)
        model.commitRound()
        let one = try Key("a.one"), two = try Key("a.two")
        let (changes, failures) = model.apply(remote: [(one, .int32(9))], holding: [one, two])
        XCTAssertTrue(failures.isEmpty)
        XCTAssertEqual(try model.value(of: "a.one"), .int32(9))
        XCTAssertEqual(try model.value(of: "a.local"), .int32(9), "fleet → local runs on every host")
        XCTAssertEqual(try model.value(of: "a.two"), .int32(0), "fleet → fleet ran on the writing host, inside its txn")
        XCTAssertTrue(changes.contains(.valueChanged(one, old: .int32(0))))
        // A value the local definition refuses is reported, not written.
        let refused = model.apply(remote: [(one, .string("nine"))], holding: [])
        XCTAssertEqual(refused.failures.map(\.0), [one])
        XCTAssertEqual(try model.value(of: "a.one"), .int32(9))
    }

    func testScopeOptionIsCheckedAndShownOnlyWhenFleet() throws {
        let model = try model()
        _ = try model.create(key: "f.shared", type: "b", defaultValue: .boolean(false), options: ["scope": .string("fleet")])
        XCTAssertEqual(try model.entry("f.shared").definition.scope, .fleet)
        XCTAssertEqual(try model.entry("f.shared").definition.metadata["scope"], .string("fleet"))
        XCTAssertNil(try model.entry("a.one").definition.metadata["scope"])
        XCTAssertThrowsError(try model.create(key: "f.bad", type: "b", defaultValue: .boolean(false), options: ["scope": .string("global")])) { error in
            XCTAssertEqual((error as? PropBusError)?.code, .invalidArgs)
            XCTAssertTrue("\(error)".contains("\"local\" or \"fleet\""), "\(error)")
        }
    }

    /// A savepoint inside the round is a copy of the round's rows to store, put back when the
    /// call rolls back; but a block of revisions the call reserved stays reserved in the model,
    /// so the store must still record it (else a restart hands those revisions out again).
    func testARolledBackCallTakesItsRowsOutButKeepsTheBlockOfRevisionsItReserved() throws {
        let model = try PropertyModel(store: store)
        _ = try model.create(key: "vm.t", type: "i", defaultValue: .int32(0), options: ["persistent": .boolean(false)])
        _ = try model.create(key: "a.kept", type: "i", defaultValue: .int32(0))
        XCTAssertNil(Round(model: model, commands: nil, store: store).end())
        _ = try model.set("a.kept", to: .int32(1))
        // Hand out the rest of the first block without another reservation.
        var value: Int32 = 0
        while model.revision < PropertyModel.revisionBlock + 1 {
            value += 1
            _ = try model.set("vm.t", to: .int32(value))
        }
        let rowsBefore = model.storeChanges
        XCTAssertNil(rowsBefore.reservation)
        let call = model.savepoint()
        _ = try model.set("vm.t", to: .int32(-1))
        _ = try model.create(key: "a.new", type: "i", defaultValue: .int32(7))
        let reserved = try XCTUnwrap(model.storeChanges.reservation, "the call's transient write needed a new block")
        model.rollback(to: call)
        XCTAssertNil(model.storeChanges.definitions[try Key("a.new")], "the call's rows left with it")
        if case .save(let kept)? = model.storeChanges.values[try Key("a.kept")] { XCTAssertEqual(kept.value, .int32(1)) } else {
            XCTFail("the round's earlier row stays")
        }
        XCTAssertEqual(model.storeChanges.reservation, reserved, "the block the call reserved is still recorded")
    }
}

/// Writes of fleet keys that no client call carries would change one host only (a fork): the
/// model refuses or skips them.
final class FleetKeysOutsideCallsTests: XCTestCase {
    private func model() throws -> PropertyModel {
        let model = try PropertyModel(store: MemoryStore())
        _ = try model.create(key: "f.shared", type: "b", defaultValue: .boolean(false), options: ["scope": .string("fleet")])
        _ = try model.create(key: "l.local", type: "b", defaultValue: .boolean(false))
        _ = model.addState(try Key("c.run.Executing"), initialValue: .boolean(false), of: try Key("c.run"), description: "running")
        model.commitRound()
        return model
    }

    func testACommandsStateKeyCannotDriveAFleetKeyEitherWayRound() throws {
        let model = try model()
        for (key, to) in [("f.shared", "c.run.Executing"), ("c.run.Executing", "f.shared")] {
            XCTAssertThrowsError(try model.bind(key: key, to: to, options: [:], owner: nil)) { error in
                let error = error as! PropBusError
                XCTAssertEqual(error.code, .invalidArgs)
                XCTAssertTrue(error.message.contains("fleet-scoped key f.shared"), error.message)
            }
        }
        // A local key may follow it, as before.
        XCTAssertNoThrow(try model.bind(key: "l.local", to: "c.run.Executing", options: [:], owner: nil))
    }

    /// Through a local key in between (state → local → fleet), each binding allowed on its own,
    /// a state change must not reach the fleet key either: it happens outside any call, so that
    /// write would change the fleet key on this host only.
    func testAStateChangeDoesNotReachAFleetKeyThroughALocalKeyInBetween() throws {
        let model = try model()
        _ = try model.bind(key: "l.local", to: "c.run.Executing", options: [:], owner: nil)
        _ = try model.bind(key: "f.shared", to: "l.local", options: [:], owner: nil)
        model.commitRound()
        _ = model.setState(try Key("c.run.Executing"), to: .boolean(true))
        XCTAssertEqual(try model.value(of: "l.local"), .boolean(true), "a local key follows the state, as before")
        XCTAssertEqual(try model.value(of: "f.shared"), .boolean(false), "the state drove a fleet key outside any call")
    }

    /// The start-up resynchronization holds a fleet key it would write directly; through a
    /// local key in between it must hold it too (no call carries that write to etcd).
    func testStartupResynchronizationDoesNotReachAFleetKeyThroughALocalKeyInBetween() throws {
        var state = StoredState()
        var shared = PropertyDefinition(key: try Key("f.shared"), type: .boolean, defaultValue: .boolean(false))
        shared.scope = .fleet
        state.definitions = [shared, PropertyDefinition(key: try Key("l.lead"), type: .boolean, defaultValue: .boolean(false)),
                             PropertyDefinition(key: try Key("l.local"), type: .boolean, defaultValue: .boolean(false))]
        state.definitionValues = [nil, (.boolean(true), 1), nil]
        state.bindings = [Binding(id: 1, key: try Key("l.local"), to: try Key("l.lead"), direction: .from, persistent: true),
                          Binding(id: 2, key: try Key("f.shared"), to: try Key("l.local"), direction: .from, persistent: true)]
        state.nextBindingID = 3
        let model = PropertyModel(store: MemoryStore(), loaded: state)
        _ = model.resynchronizeBindings(holding: model.boundKeys { $0.scope == .fleet })
        XCTAssertEqual(try model.value(of: "l.local"), .boolean(true))
        XCTAssertEqual(try model.value(of: "f.shared"), .boolean(false), "the start-up sync wrote a fleet key through a local key")
    }

    /// A model file's binding whose first sync writes a local key must not carry that write on
    /// into a shared key through another binding (the keys the file holds cover the chain).
    func testAFirstSyncDoesNotReachAHeldKeyThroughALocalKeyInBetween() throws {
        let model = try model()
        _ = try model.create(key: "l.lead", type: "b", defaultValue: .boolean(true))
        _ = try model.bind(key: "f.shared", to: "l.local", options: [:], owner: nil)
        model.commitRound()
        _ = try model.bind(key: "l.local", to: "l.lead", options: [:], owner: nil, holding: model.boundKeys { $0.scope == .fleet })
        XCTAssertEqual(try model.value(of: "l.local"), .boolean(true))
        XCTAssertEqual(try model.value(of: "f.shared"), .boolean(false), "the first sync wrote a held key through a local key")
    }

    func testBindingsFromAStateKeyToAFleetKeyLoadedFromAStoreAreEndedAndNamed() throws {
        var state = StoredState()
        var shared = PropertyDefinition(key: try Key("f.shared"), type: .boolean, defaultValue: .boolean(false))
        shared.scope = .fleet
        state.definitions = [shared, PropertyDefinition(key: try Key("l.local"), type: .boolean, defaultValue: .boolean(false))]
        state.definitionValues = [nil, nil]
        // As a build from before Bind's rule stored them; the second one is allowed.
        state.bindings = [Binding(id: 1, key: try Key("f.shared"), to: try Key("c.run.Executing"), direction: .from, persistent: true),
                          Binding(id: 2, key: try Key("l.local"), to: try Key("c.run.Executing"), direction: .from, persistent: true)]
        state.nextBindingID = 3
        let model = PropertyModel(store: MemoryStore(), loaded: state)
        _ = model.addState(try Key("c.run.Executing"), initialValue: .boolean(false), of: try Key("c.run"), description: "running")

        let (ended, changes) = model.unbindStateDrivingFleetKeys()
        XCTAssertEqual(ended.map(\.binding.id), [1])
        XCTAssertTrue(ended.first?.reason.contains("cannot drive the fleet-scoped key f.shared") == true, "\(ended)")
        XCTAssertEqual(changes.count, 1)
        XCTAssertEqual(model.bindings.all.map(\.id), [2])
        // Executions now move the local key only.
        _ = model.setState(try Key("c.run.Executing"), to: .boolean(true))
        XCTAssertEqual(try model.value(of: "f.shared"), .boolean(false))
        XCTAssertEqual(try model.value(of: "l.local"), .boolean(true))
    }

    func testStartupResynchronizationHoldsFleetKeysWhenAsked() throws {
        let model = try model()
        _ = try model.create(key: "l.source", type: "b", defaultValue: .boolean(false))
        // One way (the key follows l.source), so the writes below do not flow back.
        _ = try model.bind(key: "f.shared", to: "l.source", options: ["direction": .string("from")], owner: nil)
        _ = try model.bind(key: "l.local", to: "l.source", options: ["direction": .string("from")], owner: nil)
        model.commitRound()
        // Another host's value arrived while the binding's source stayed as it was.
        _ = try model.set("f.shared", to: .boolean(true))
        _ = try model.set("l.local", to: .boolean(true))
        let held = model.resynchronizeBindings(holding: model.boundKeys { $0.scope == .fleet })
        XCTAssertTrue(held.failures.isEmpty)
        XCTAssertEqual(try model.value(of: "f.shared"), .boolean(true), "the fleet's value stands")
        XCTAssertEqual(try model.value(of: "l.local"), .boolean(false), "a local target still follows its source")
        _ = model.resynchronizeBindings()
        XCTAssertEqual(try model.value(of: "f.shared"), .boolean(false), "without the fleet, every binding is synchronized")
    }
}
