import DBusValues
import Foundation
import PropBus
import XCTest

/// The channel rules (docs/channels.md) on the core model, without a bus.
final class ChannelTests: XCTestCase {
    private var model: PropertyModel!

    override func setUp() {
        model = try! PropertyModel(store: MemoryStore())
    }

    private func create(_ key: String, _ type: String, _ value: DBusValue) throws {
        _ = try model.create(key: key, type: type, defaultValue: value)
    }

    private func value(_ key: String) throws -> DBusValue { try model.value(of: key) }

    private func bind(_ key: String, _ to: String, _ options: [String: DBusValue] = [:]) throws -> Binding {
        try model.bind(key: key, to: to, options: options, owner: ":1.1").binding
    }

    private static let onOff: [String: DBusValue] = [
        "to_key": .string(#"value == "1" ? "On" : "Off""#),
        "to_target": .string(#"value == "On" ? "1" : "0""#),
    ]

    func testBindingGivesKeyTheLeadingSidesValueAndWritesNothingToIt() throws {
        try create("ui.switch.on", "b", .boolean(false))
        try create("settings.someBoolKey", "b", .boolean(true))
        let before = try model.entry("settings.someBoolKey").revision
        _ = try bind("ui.switch.on", "settings.someBoolKey")
        XCTAssertEqual(try value("ui.switch.on"), .boolean(true))
        XCTAssertEqual(try model.entry("settings.someBoolKey").revision, before)
    }

    func testChangesFlowBothWaysThroughTransforms() throws {
        try create("ui.valueA", "s", .string("Off"))
        try create("model.valueB", "s", .string("1"))
        _ = try bind("ui.valueA", "model.valueB", Self.onOff)
        XCTAssertEqual(try value("ui.valueA"), .string("On"))
        let changes = try model.set("ui.valueA", to: .string("Off"))
        XCTAssertEqual(try value("model.valueB"), .string("0"))
        XCTAssertEqual(Set(changes.map(\.key.text)), ["ui.valueA", "model.valueB"], "one change per side, no echo")
        _ = try model.set("model.valueB", to: .string("1"))
        XCTAssertEqual(try value("ui.valueA"), .string("On"))
    }

    /// ReactiveCocoa's `rac_channelTerminalForKey` bug: toggling one side, then changing the other
    /// side, must always leave the bound side equal to the mapped value.
    func testEveryToggleSequenceThenARemoteChangeLeavesBothSidesEqual() throws {
        for toggles in 1...4 {
            for toggleFollowingSide in [true, false] {
                for final in [true, false] {
                    setUp()
                    try create("ui.switch.on", "b", .boolean(false))
                    try create("settings.someBoolKey", "b", .boolean(true))
                    _ = try bind("ui.switch.on", "settings.someBoolKey")
                    let (toggled, other) = toggleFollowingSide ? ("ui.switch.on", "settings.someBoolKey") : ("settings.someBoolKey", "ui.switch.on")
                    for _ in 0..<toggles {
                        guard case .boolean(let current) = try value(toggled) else { return XCTFail() }
                        _ = try model.set(toggled, to: .boolean(!current))
                    }
                    _ = try model.set(other, to: .boolean(final))
                    let context = "\(toggles) toggles of \(toggled), then \(other) = \(final)"
                    XCTAssertEqual(try value(other), .boolean(final), context)
                    XCTAssertEqual(try value(toggled), .boolean(final), context)
                }
            }
        }
    }

    /// ReactiveCocoa PR #470: a write that produced no notification must not leave an "ignore the
    /// next update" state behind.
    func testSameValueLocalWriteDoesNotSwallowNextRemoteChange() throws {
        try create("ui.switch.on", "b", .boolean(false))
        try create("settings.someBoolKey", "b", .boolean(false))
        _ = try bind("ui.switch.on", "settings.someBoolKey")
        XCTAssertEqual(try model.set("ui.switch.on", to: .boolean(false)), [])
        _ = try model.set("settings.someBoolKey", to: .boolean(true))
        XCTAssertEqual(try value("ui.switch.on"), .boolean(true))
    }

    func testCycleSettlesInOneStep() throws {
        for key in ["c.a", "c.b", "c.c"] { try create(key, "i", .int32(0)) }
        _ = try bind("c.a", "c.b")
        _ = try bind("c.b", "c.c")
        _ = try bind("c.c", "c.a")
        let changes = try model.set("c.b", to: .int32(7))
        XCTAssertEqual(changes.count, 3)
        for key in ["c.a", "c.b", "c.c"] { XCTAssertEqual(try value(key), .int32(7), key) }
    }

    func testCycleWithNonInverseTransformsTerminates() throws {
        try create("n.a", "i", .int32(0))
        try create("n.b", "i", .int32(0))
        _ = try bind("n.a", "n.b", ["to_key": .string("value + 1"), "to_target": .string("value + 1")])
        _ = try model.set("n.a", to: .int32(10))
        XCTAssertEqual(try value("n.a"), .int32(10), "the origin is never written back")
        XCTAssertEqual(try value("n.b"), .int32(11))
    }

    func testUnmappableValueIsRejectedAtomically() throws {
        try create("r.small", "y", .byte(0))
        try create("r.big", "i", .int32(0))
        try create("r.other", "i", .int32(0))
        _ = try bind("r.small", "r.big")
        XCTAssertThrowsError(try model.apply(set: [("r.other", .int32(5)), ("r.big", .int32(300))], reset: [])) { error in
            XCTAssertEqual((error as? PropBusError)?.code, .transformFailed)
            XCTAssertTrue((error as? PropBusError)?.message.contains("300 does not fit") ?? false, "\(error)")
        }
        XCTAssertEqual(try value("r.big"), .int32(0))
        XCTAssertEqual(try value("r.small"), .byte(0))
        XCTAssertEqual(try value("r.other"), .int32(0))
    }

    func testTargetsOwnCheckRejectsTheWholeSet() throws {
        _ = try model.create(key: "t.pct", type: "i", defaultValue: .int32(0), options: ["maximum": .int32(100)])
        try create("t.raw", "i", .int32(0))
        _ = try bind("t.pct", "t.raw")
        XCTAssertThrowsError(try model.set("t.raw", to: .int32(150))) { error in
            XCTAssertEqual((error as? PropBusError)?.code, .outOfRange)
        }
        XCTAssertEqual(try value("t.raw"), .int32(0))
    }

    func testDirectionsLimitTheFlow() throws {
        for key in ["d.k1", "d.t1", "d.k2", "d.t2"] { try create(key, "i", .int32(1)) }
        _ = try model.set("d.t1", to: .int32(5))
        _ = try bind("d.k1", "d.t1", ["direction": .string("from")])
        XCTAssertEqual(try value("d.k1"), .int32(5))
        _ = try model.set("d.k1", to: .int32(9))
        XCTAssertEqual(try value("d.t1"), .int32(5), "from: key changes do not reach to")

        _ = try model.set("d.k2", to: .int32(3))
        _ = try bind("d.k2", "d.t2", ["direction": .string("to")])
        XCTAssertEqual(try value("d.t2"), .int32(3), "to: the key leads")
        _ = try model.set("d.t2", to: .int32(8))
        XCTAssertEqual(try value("d.k2"), .int32(3), "to: changes of to do not reach key")
    }

    func testResetPropagatesTheDefault() throws {
        try create("z.a", "s", .string("default"))
        try create("z.b", "s", .string(""))
        _ = try bind("z.b", "z.a")
        _ = try model.set("z.a", to: .string("changed"))
        XCTAssertEqual(try value("z.b"), .string("changed"))
        _ = try model.reset("z.a")
        XCTAssertEqual(try value("z.b"), .string("default"))
    }

    func testStaticTypeErrorsAreRefusedAtBindTime() throws {
        try create("s.text", "s", .string(""))
        try create("s.flag", "b", .boolean(false))
        XCTAssertThrowsError(try bind("s.flag", "s.text")) { error in
            XCTAssertEqual((error as? PropBusError)?.code, .transformFailed)
        }
        XCTAssertThrowsError(try bind("s.flag", "s.text", ["to_key": .string("length(value")])) { error in
            XCTAssertEqual((error as? PropBusError)?.code, .invalidExpression)
        }
        _ = try bind("s.flag", "s.text", ["to_key": .string("length(value) > 3"), "direction": .string("from")])
        _ = try model.set("s.text", to: .string("kittens"))
        XCTAssertEqual(try value("s.flag"), .boolean(true))
    }

    func testConnectionLeavingEndsOnlyItsNonPersistentBindings() throws {
        for key in ["o.a", "o.b", "o.c"] { try create(key, "i", .int32(0)) }
        _ = try model.bind(key: "o.a", to: "o.b", options: [:], owner: ":1.5")
        _ = try model.bind(key: "o.b", to: "o.c", options: ["persistent": .boolean(true)], owner: ":1.5")
        _ = try model.bind(key: "o.a", to: "o.c", options: [:], owner: ":1.6")
        let ended = model.unbindAll(ownedBy: ":1.5")
        XCTAssertEqual(ended.count, 1)
        XCTAssertEqual(model.bindings.all.count, 2)
    }

    func testPerConnectionLimit() throws {
        for key in ["l.a", "l.b", "l.c"] { try create(key, "i", .int32(0)) }
        _ = try model.bind(key: "l.a", to: "l.b", options: [:], owner: ":1.9", maximumPerOwner: 1)
        XCTAssertThrowsError(try model.bind(key: "l.a", to: "l.c", options: [:], owner: ":1.9", maximumPerOwner: 1)) { error in
            XCTAssertEqual((error as? PropBusError)?.code, .limitsExceeded)
        }
    }

    func testRollbackRestoresBindingsAndValues() throws {
        try create("u.a", "i", .int32(0))
        try create("u.b", "i", .int32(0))
        model.commitRound()
        _ = try bind("u.a", "u.b")
        _ = try model.set("u.b", to: .int32(4))
        model.rollbackRound()
        XCTAssertTrue(model.bindings.all.isEmpty)
        XCTAssertEqual(try value("u.a"), .int32(0))
        XCTAssertEqual(try value("u.b"), .int32(0))
    }

    func testDeletingABoundKeyEndsTheBinding() throws {
        try create("x.a", "i", .int32(0))
        try create("x.b", "i", .int32(0))
        _ = try bind("x.a", "x.b")
        let changes = try model.delete(key: "x.b")
        XCTAssertTrue(changes.contains { if case .unbound = $0 { true } else { false } })
        XCTAssertTrue(model.bindings.all.isEmpty)
    }

    func testBindingsGroupIsReserved() throws {
        XCTAssertThrowsError(try create("bindings.1.x", "i", .int32(0))) { error in
            XCTAssertEqual((error as? PropBusError)?.code, .invalidKey)
        }
    }
}
