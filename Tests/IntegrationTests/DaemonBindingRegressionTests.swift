import DBus
import Foundation
import XCTest

/// The ReactiveCocoa channel bugs the background notes list, as regression tests for daemon-side bindings.
///
/// 1. Stale dedupe: `rac_channelTerminalForKey` filtered its own writes before
///    `distinctUntilChanged`, so the remembered last value went stale and a later change was
///    swallowed. propbus compares with the other side's *current* value.
/// 2. The stuck ignore flag: a write that produced no notification left "ignore the next
///    update" set, and it swallowed the next real change.
final class DaemonBindingRegressionTests: DaemonBindingTestCase, @unchecked Sendable {
    /// A two-valued channel: the values each side toggles between, and how each side maps.
    struct Channel: Sendable {
        var name: String
        var type: String
        /// key's two values, `off` first.
        var keyValues: [DBusValue]
        /// to's two values, `off` first.
        var toValues: [DBusValue]
        var options: [String: DBusValue]
        /// What key becomes for a value of to (`to_key`).
        var toKey: @Sendable (DBusValue) -> DBusValue
        /// What to becomes for a value of key (`to_target`).
        var toTarget: @Sendable (DBusValue) -> DBusValue

        static let identity = Channel(name: "b ↔ b", type: "b", keyValues: [.boolean(false), .boolean(true)],
                                      toValues: [.boolean(false), .boolean(true)], options: [:],
                                      toKey: { $0 }, toTarget: { $0 })

        static let onOff = Channel(
            name: "On/Off ↔ 1/0", type: "s", keyValues: [.string("Off"), .string("On")], toValues: [.string("0"), .string("1")],
            options: ["to_key": .string(#"value == "1" ? "On" : "Off""#), "to_target": .string(#"value == "On" ? "1" : "0""#)],
            toKey: { $0 == .string("1") ? .string("On") : .string("Off") },
            toTarget: { $0 == .string("On") ? .string("1") : .string("0") })
    }

    /// What the daemon should do, computed independently: each write changes its key if the value
    /// differs, and then the other side if its mapped value differs from its current value.
    struct Expectation {
        var values: [String: DBusValue] = [:]
        var history: [String: [DBusValue]] = [:]

        mutating func write(_ key: String, _ value: DBusValue, other: String, map: (DBusValue) -> DBusValue) {
            guard values[key] != value else { return }
            assign(key, value)
            let mapped = map(value)
            if values[other] != mapped { assign(other, mapped) }
        }

        mutating func assign(_ key: String, _ value: DBusValue) {
            values[key] = value
            history[key, default: []].append(value)
        }
    }

    /// Every combination of 1–4 toggles of one side followed by a change of either value on the
    /// other side, from either starting value, toggling either side. After each sequence the two
    /// sides must agree through the mapping, and each side's PropertiesChanged history must be
    /// exactly its sequence of changes.
    private func runEveryToggleSequence(_ channel: Channel) async throws {
        let changes = try await recordAllChanges()
        var expected = Expectation()
        var keysUsed: [String] = []
        var sequence = 0
        for toggledSide in ["key", "to"] {
            for initial in 0...1 {
                for toggles in 1...4 {
                    for final in 0...1 {
                        sequence += 1
                        let key = "rac\(sequence).view.on", to = "rac\(sequence).defaults.someBoolKey"
                        keysUsed += [key, to]
                        let story = "\(channel.name): \(toggledSide) toggled \(toggles)× from the defaults value \(channel.toValues[initial]), "
                            + "then the other side set to value #\(final)"
                        try await client.create(key, channel.type, default: channel.keyValues[0])
                        try await client.create(to, channel.type, default: channel.toValues[0])
                        // Each key is its group's first: the group's appearance announces it.
                        expected.assign(key, channel.keyValues[0])
                        expected.assign(to, channel.toValues[0])

                        // The defaults value is set, then the switch is bound and follows it.
                        try await client.set(to, channel.toValues[initial])
                        if expected.values[to] != channel.toValues[initial] { expected.assign(to, channel.toValues[initial]) }
                        try await bindKey(key, to: to, channel.options)
                        if expected.values[key] != channel.toKey(expected.values[to]!) {
                            expected.assign(key, channel.toKey(expected.values[to]!))
                        }

                        let (side, other) = toggledSide == "key" ? (key, to) : (to, key)
                        let (sideValues, otherValues) = toggledSide == "key"
                            ? (channel.keyValues, channel.toValues) : (channel.toValues, channel.keyValues)
                        let (sideMap, otherMap) = toggledSide == "key"
                            ? (channel.toTarget, channel.toKey) : (channel.toKey, channel.toTarget)
                        for _ in 0..<toggles {
                            let flipped = expected.values[side] == sideValues[1] ? sideValues[0] : sideValues[1]
                            try await client.set(side, flipped)
                            expected.write(side, flipped, other: other, map: sideMap)
                        }
                        try await client.set(other, otherValues[final])
                        expected.write(other, otherValues[final], other: side, map: otherMap)

                        let actual = try await values([key, to])
                        XCTAssertEqual(actual[other], otherValues[final], story)
                        XCTAssertEqual(actual[side], otherMap(otherValues[final]),
                                       "\(story): the bound side did not end equal to the mapped value")
                        XCTAssertEqual(actual, [key: expected.values[key]!, to: expected.values[to]!], story)
                    }
                }
            }
        }
        let signals = try await settle(changes)
        for key in keysUsed {
            XCTAssertEqual(Self.history(of: key, in: signals), expected.history[key] ?? [],
                           "\(channel.name): PropertiesChanged history of \(key)")
        }
    }

    func testStaleDedupeNeverSwallowsAChangeThroughAnIdentityBinding() async throws {
        try await runEveryToggleSequence(.identity)
    }

    func testStaleDedupeNeverSwallowsAChangeThroughTheOnOffMapping() async throws {
        try await runEveryToggleSequence(.onOff)
    }

    /// The exact sequence of the background note: defaults YES, switch follows; the user flips
    /// the switch off; defaults set to YES again. The switch must be on.
    func testSwitchFollowsDefaultsSetAgainAfterTheUserFlippedIt() async throws {
        try await create([("ui.switch.on", "b", .boolean(false)), ("settings.someBoolKey", "b", .boolean(false))])
        try await client.set("settings.someBoolKey", .boolean(true))
        try await bindKey("ui.switch.on", to: "settings.someBoolKey")
        try await assertValues(["ui.switch.on": .boolean(true)])
        try await client.set("ui.switch.on", .boolean(false))
        try await assertValues(["settings.someBoolKey": .boolean(false)])
        let changes = try await recordAllChanges()
        try await client.set("settings.someBoolKey", .boolean(true))
        try await assertValues(["ui.switch.on": .boolean(true)], "the switch stayed off although defaults is YES")
        let signals = try await settle(changes)
        XCTAssertEqual(Self.history(of: "ui.switch.on", in: signals), [.boolean(true)])
    }

    // MARK: The stuck ignore flag

    /// Each way a client can write a value equal to the current one.
    private func writeSameValue(_ how: String, _ key: String, _ value: DBusValue) async throws {
        switch how {
        case "Set": try await client.set(key, value)
        case "Apply": try await client.apply(set: [(key, value)])
        case "CompareAndSet":
            let current = try await client.getWithRevision(key)
            try await client.compareAndSet(key, revision: current.revision, value)
        case "busctl":
            let (path, name) = PropBusAPI.locate(key)
            let result = try await busctl(["set-property", PropBusAPI.busName, path, PropBusAPI.values, name, "b", value.boolValue! ? "true" : "false"])
            XCTAssertTrue(result.succeeded, "\(result)")
        default: XCTFail("unknown write \(how)")
        }
    }

    func testSameValueWriteOnOneSideDoesNotSwallowTheNextChangeFromTheOther() async throws {
        let changes = try await recordAllChanges()
        var expectedHistory: [String: [DBusValue]] = [:]
        var index = 0
        for how in ["Set", "Apply", "CompareAndSet", "busctl"] {
            for writtenSide in ["key", "to"] {
                index += 1
                let key = "same\(index).view.on", to = "same\(index).model.on"
                try await create([(key, "b", .boolean(true)), (to, "b", .boolean(true))])
                try await bindKey(key, to: to)
                let (side, other) = writtenSide == "key" ? (key, to) : (to, key)
                // A write that changes nothing, twice: no notification, nothing to ignore later.
                try await writeSameValue(how, side, .boolean(true))
                try await writeSameValue(how, side, .boolean(true))
                try await client.set(other, .boolean(false))
                try await assertValues([side: .boolean(false)], "\(how) of the same value on \(writtenSide) swallowed the next change")
                try await client.set(other, .boolean(true))
                try await assertValues([side: .boolean(true)], "\(how) on \(writtenSide): second change")
                // The group's appearance (its first key) is announced with the value, then two changes.
                expectedHistory[key] = [.boolean(true), .boolean(false), .boolean(true)]
                expectedHistory[to] = [.boolean(true), .boolean(false), .boolean(true)]
            }
        }
        let signals = try await settle(changes)
        for (key, history) in expectedHistory {
            XCTAssertEqual(Self.history(of: key, in: signals), history, key)
        }
    }

    func testPropagationThatChangesNothingOnTheOtherSideDoesNotSwallowTheNextChange() async throws {
        try await create([("ui.power.label", "s", .string("Off")), ("dev.power.digit", "s", .string("0"))])
        try await bindKey("ui.power.label", to: "dev.power.digit", Channel.onOff.options)
        let changes = try await recordAllChanges()
        // "2" maps to "Off", which the label already is: a change that notifies nothing on the label side.
        try await client.set("dev.power.digit", .string("2"))
        try await assertValues(["ui.power.label": .string("Off"), "dev.power.digit": .string("2")])
        try await client.set("ui.power.label", .string("On"))
        try await assertValues(["dev.power.digit": .string("1")], "the label's change after a silent propagation was swallowed")
        try await client.set("dev.power.digit", .string("2"))
        try await assertValues(["ui.power.label": .string("Off")])
        try await client.set("dev.power.digit", .string("1"))
        try await assertValues(["ui.power.label": .string("On")])
        let signals = try await settle(changes)
        XCTAssertEqual(Self.history(of: "ui.power.label", in: signals), ["On", "Off", "On"].map(DBusValue.string))
        XCTAssertEqual(Self.history(of: "dev.power.digit", in: signals), ["2", "1", "2", "1"].map(DBusValue.string))
    }

    /// A binding made later gets the current value, not a replayed old one.
    func testBindingMadeLaterGetsTheCurrentValue() async throws {
        try await create([("ui.search.text", "s", .string("")), ("vm.search.text", "s", .string(""))])
        for text in ["k", "ki", "kit", "kittens"] { try await client.set("vm.search.text", .string(text)) }
        try await bindKey("ui.search.text", to: "vm.search.text")
        try await assertValues(["ui.search.text": .string("kittens")])
    }
}
