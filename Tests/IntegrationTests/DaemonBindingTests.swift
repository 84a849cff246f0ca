import DBus
import Foundation
import XCTest

/// One row of `Manager.ListBindings`.
struct ListedBinding: Equatable, CustomStringConvertible {
    var path: String
    var key: String
    var to: String
    var options: [String: DBusValue]

    var description: String { "\(path) \(key) ← \(to) \(options)" }
}

/// A daemon test case with helpers for daemon-side bindings (docs/channels.md).
///
/// "No signal" is proven as in ``PropertiesChangedTests``: `test.marker.tick` changes after the
/// operations under test, and since the daemon's signals reach a subscriber in the order it sent
/// them, whatever arrived before the marker's signal is everything the operations emitted.
class DaemonBindingTestCase: DaemonTestCase, @unchecked Sendable {
    static let bindingInterface = "org.propbus.PropBus1.Binding"
    static let bindingsPath = PropBusAPI.rootPath + "/bindings"
    static let markerKey = "test.marker.tick"

    private var markerValue: Int32 = 0

    override func setUp() async throws {
        try await super.setUp()
        try await client.create(Self.markerKey, "i", default: .int32(0))
    }

    // MARK: Manager calls

    /// `Manager.Bind(key, to, options)`; returns the binding's object path.
    @discardableResult
    func bindKey(_ key: String, to: String, _ options: [String: DBusValue] = [:], via caller: Client? = nil) async throws -> String {
        let reply = try await (caller ?? client).call(PropBusAPI.manager, "Bind", [.string(key), .string(to), .vardict(options)])
        guard reply.count == 1, case .objectPath(let path) = reply[0] else { throw TestSetupError("Bind replied \(reply)") }
        return path
    }

    func unbind(_ path: String, via caller: Client? = nil) async throws {
        try await (caller ?? client).call(PropBusAPI.manager, "Unbind", [.objectPath(path)])
    }

    func listBindings() async throws -> [ListedBinding] {
        let reply = try await client.call(PropBusAPI.manager, "ListBindings")
        guard reply.count == 1, case .array(let element, let rows) = reply[0] else { throw TestSetupError("ListBindings replied \(reply)") }
        XCTAssertEqual(element.signature, "(ossa{sv})")
        return try rows.map { row in
            guard case .structure(let fields) = row, fields.count == 4, case .objectPath(let path) = fields[0],
                  let key = fields[1].stringValue, let to = fields[2].stringValue, let options = fields[3].stringKeyedEntries else {
                throw TestSetupError("ListBindings row \(row)")
            }
            return ListedBinding(path: path, key: key, to: to, options: options.mapValues(\.unwrappingVariantOnce))
        }
    }

    /// A property of a binding object's `org.propbus.PropBus1.Binding` interface.
    func bindingProperty(_ path: String, _ name: String) async throws -> DBusValue {
        let reply = try await client.call(at: path, PropBusAPI.properties, "Get", [.string(Self.bindingInterface), .string(name)])
        guard reply.count == 1, case .variant(let value) = reply[0] else { throw TestSetupError("Get replied \(reply)") }
        return value
    }

    // MARK: Values

    /// Creates each key with its type and default.
    func create(_ keys: [(String, String, DBusValue)], options: [String: DBusValue] = [:]) async throws {
        for (key, type, defaultValue) in keys { try await client.create(key, type, default: defaultValue, options: options) }
    }

    /// The current values of `keys`, by key.
    func values(_ keys: [String]) async throws -> [String: DBusValue] {
        var result: [String: DBusValue] = [:]
        for key in keys { result[key] = try await client.get(key) }
        return result
    }

    /// Asserts the current value of each key.
    func assertValues(_ expected: [String: DBusValue], _ message: @autoclosure () -> String = "",
                      file: StaticString = #filePath, line: UInt = #line) async throws {
        let actual = try await values(Array(expected.keys))
        XCTAssertEqual(actual, expected, message(), file: file, line: line)
    }

    /// The value and revision of each key, to show that nothing changed.
    func snapshot(_ keys: [String]) async throws -> [String: String] {
        var result: [String: String] = [:]
        for key in keys {
            let current = try await client.getWithRevision(key)
            let listed = try await client.list(prefix: key).first { $0.key == key }
            result[key] = "\(current.value) rev \(current.revision) is_set \(listed?.metadata["is_set"].map { "\($0)" } ?? "?")"
        }
        return result
    }

    // MARK: Signals

    /// Records every PropertiesChanged below the root object.
    func recordAllChanges() async throws -> SignalRecorder {
        try await client.record(pathNamespace: PropBusAPI.rootPath, interface: PropBusAPI.properties, member: "PropertiesChanged")
    }

    /// Records the ObjectManager signals of the root object.
    func recordObjects() async throws -> SignalRecorder {
        try await client.record(path: PropBusAPI.rootPath, interface: PropBusAPI.objectManager)
    }

    /// Changes the marker and returns, as (group, changed properties), every PropertiesChanged
    /// that `recorder` got before the marker's.
    func settle(_ recorder: SignalRecorder, file: StaticString = #filePath, line: UInt = #line) async throws -> [Change] {
        markerValue += 1
        let tick = markerValue
        try await client.set(Self.markerKey, .int32(tick))
        let markerPath = PropBusAPI.locate(Self.markerKey).path
        let signals = await recorder.wait(timeout: 10) { signals in
            signals.contains { $0.path == markerPath && $0.changed["tick"] == .int32(tick) }
        }
        guard let end = signals.firstIndex(where: { $0.path == markerPath && $0.changed["tick"] == .int32(tick) }) else {
            XCTFail("the marker's PropertiesChanged never arrived; got \(signals)", file: file, line: line)
            return []
        }
        let start = signals[..<end].lastIndex { $0.path == markerPath }.map { $0 + 1 } ?? 0
        return signals[start..<end].map { Change(group: Self.group(ofPath: $0.path), changed: $0.changed) }
    }

    /// A PropertiesChanged as a test compares it: the group and its changed properties.
    struct Change: Equatable, CustomStringConvertible {
        var group: String
        var changed: [String: DBusValue]
        var description: String { "\(group) \(changed)" }
    }

    static func group(ofPath path: String) -> String {
        String(path.dropFirst(PropBusAPI.rootPath.count + 1)).replacingOccurrences(of: "/", with: ".")
    }

    /// The values a key was signalled with, in order.
    static func history(of key: String, in changes: [Change]) -> [DBusValue] {
        let (group, name) = split(key)
        return changes.filter { $0.group == group }.compactMap { $0.changed[name] }
    }

    static func split(_ key: String) -> (group: String, name: String) {
        let dot = key.lastIndex(of: ".")!
        return (String(key[..<dot]), String(key[key.index(after: dot)...]))
    }
}

/// docs/channels.md: a binding's initial sync, two-way propagation without echo, transforms, directions,
/// chains and cycles, Apply and Reset, and the binding objects.
final class DaemonBindingTests: DaemonBindingTestCase, @unchecked Sendable {
    // MARK: Bind time

    func testKeyTakesTheCurrentValueOfToAtBindTimeAndToIsNeverWritten() async throws {
        try await create([("ui.switch.on", "b", .boolean(false)), ("settings.someBoolKey", "b", .boolean(false))])
        // `to` moved away from its default before the binding exists: the binding sees the current value.
        try await client.set("settings.someBoolKey", .boolean(true))
        let toBefore = try await snapshot(["settings.someBoolKey"])
        let keyBefore = try await client.getWithRevision("ui.switch.on")
        let changes = try await recordAllChanges()

        try await bindKey("ui.switch.on", to: "settings.someBoolKey")

        try await assertValues(["ui.switch.on": .boolean(true), "settings.someBoolKey": .boolean(true)])
        let toAfter = try await snapshot(["settings.someBoolKey"])
        XCTAssertEqual(toAfter, toBefore, "binding wrote to its right-hand side")
        let keyAfter = try await client.getWithRevision("ui.switch.on")
        XCTAssertGreaterThan(keyAfter.revision, keyBefore.revision)
        let signals = try await settle(changes)
        XCTAssertEqual(signals, [Change(group: "ui.switch", changed: ["on": .boolean(true)])],
                       "only the left-hand side may change at bind time")
    }

    func testKeysOwnValueIsNeverWrittenToToEvenWhenToIsUnset() async throws {
        try await create([("ui.switch.on", "b", .boolean(false)), ("settings.someBoolKey", "b", .boolean(false))])
        try await client.set("ui.switch.on", .boolean(true))
        let toBefore = try await snapshot(["settings.someBoolKey"])
        let changes = try await recordAllChanges()

        try await bindKey("ui.switch.on", to: "settings.someBoolKey")

        try await assertValues(["ui.switch.on": .boolean(false), "settings.someBoolKey": .boolean(false)])
        let toAfter = try await snapshot(["settings.someBoolKey"])
        XCTAssertEqual(toAfter, toBefore, "the right-hand side must stay unset, at its revision")
        let signals = try await settle(changes)
        XCTAssertEqual(signals, [Change(group: "ui.switch", changed: ["on": .boolean(false)])])
    }

    func testBindingSidesThatAlreadyAgreeChangesNothing() async throws {
        try await create([("ui.switch.on", "b", .boolean(true)), ("settings.someBoolKey", "b", .boolean(true))])
        let before = try await snapshot(["ui.switch.on", "settings.someBoolKey"])
        let changes = try await recordAllChanges()
        try await bindKey("ui.switch.on", to: "settings.someBoolKey")
        let after = try await snapshot(["ui.switch.on", "settings.someBoolKey"])
        XCTAssertEqual(after, before)
        let signals = try await settle(changes)
        XCTAssertEqual(signals, [])
    }

    // MARK: Two-way propagation

    func testEachChangeEmitsExactlyOnePropertiesChangedPerSideAndNoEcho() async throws {
        try await create([("ui.switch.on", "b", .boolean(false)), ("settings.someBoolKey", "b", .boolean(false))])
        try await bindKey("ui.switch.on", to: "settings.someBoolKey")
        let changes = try await recordAllChanges()

        try await client.set("settings.someBoolKey", .boolean(true))
        try await assertValues(["ui.switch.on": .boolean(true)])
        try await client.set("ui.switch.on", .boolean(false))
        try await assertValues(["settings.someBoolKey": .boolean(false)])
        try await client.set("settings.someBoolKey", .boolean(true))
        try await client.set("ui.switch.on", .boolean(false))

        let signals = try await settle(changes)
        XCTAssertEqual(signals.count, 8, "one signal per side per change: \(signals)")
        let expected: [DBusValue] = [.boolean(true), .boolean(false), .boolean(true), .boolean(false)]
        XCTAssertEqual(Self.history(of: "ui.switch.on", in: signals), expected)
        XCTAssertEqual(Self.history(of: "settings.someBoolKey", in: signals), expected)
        for signal in signals { XCTAssertEqual(signal.changed.count, 1, "\(signal)") }
    }

    func testBothSidesInOneGroupShareOneSignalPerChange() async throws {
        try await create([("view.text", "s", .string("")), ("view.mirror", "s", .string(""))])
        try await bindKey("view.mirror", to: "view.text")
        let changes = try await recordAllChanges()
        try await client.set("view.text", .string("kittens"))
        try await client.set("view.mirror", .string("puppies"))
        let signals = try await settle(changes)
        XCTAssertEqual(signals, [
            Change(group: "view", changed: ["text": .string("kittens"), "mirror": .string("kittens")]),
            Change(group: "view", changed: ["text": .string("puppies"), "mirror": .string("puppies")]),
        ])
    }

    func testSetsThroughBusctlPropagateToo() async throws {
        try await create([("ui.switch.on", "b", .boolean(false)), ("settings.someBoolKey", "b", .boolean(false))])
        try await bindKey("ui.switch.on", to: "settings.someBoolKey")
        let result = try await busctl(["set-property", PropBusAPI.busName, PropBusAPI.rootPath + "/settings", PropBusAPI.values,
                                       "someBoolKey", "b", "true"])
        XCTAssertTrue(result.succeeded, "\(result)")
        try await assertValues(["ui.switch.on": .boolean(true)])
    }

    // MARK: Transforms

    func testOnOffMapsToOneZeroBothWays() async throws {
        try await create([("ui.power.label", "s", .string("Off")), ("dev.power.digit", "s", .string("0"))])
        try await client.set("dev.power.digit", .string("1"))
        let path = try await bindKey("ui.power.label", to: "dev.power.digit", [
            "to_key": .string(#"value == "1" ? "On" : "Off""#),
            "to_target": .string(#"value == "On" ? "1" : "0""#),
        ])
        try await assertValues(["ui.power.label": .string("On"), "dev.power.digit": .string("1")], "bind time maps 1 → On")
        let changes = try await recordAllChanges()

        try await client.set("ui.power.label", .string("Off"))
        try await assertValues(["dev.power.digit": .string("0")], "Off → 0")
        try await client.set("dev.power.digit", .string("1"))
        try await assertValues(["ui.power.label": .string("On")], "1 → On")
        try await client.set("ui.power.label", .string("Off"))
        try await assertValues(["dev.power.digit": .string("0")])
        try await client.set("ui.power.label", .string("On"))
        try await assertValues(["dev.power.digit": .string("1")], "On → 1")

        let signals = try await settle(changes)
        XCTAssertEqual(Self.history(of: "ui.power.label", in: signals), ["Off", "On", "Off", "On"].map(DBusValue.string))
        XCTAssertEqual(Self.history(of: "dev.power.digit", in: signals), ["0", "1", "0", "1"].map(DBusValue.string))
        let toKey = try await bindingProperty(path, "ToKey")
        XCTAssertEqual(toKey, .string(#"value == "1" ? "On" : "Off""#))
        let toTarget = try await bindingProperty(path, "ToTarget")
        XCTAssertEqual(toTarget, .string(#"value == "On" ? "1" : "0""#))
    }

    func testTransformsConvertBetweenTypes() async throws {
        try await create([("ui.slider.percent", "d", .double(0)), ("dev.volume.level", "y", .byte(0))])
        try await bindKey("ui.slider.percent", to: "dev.volume.level", [
            "to_key": .string("value * 100 / 255.0"),
            "to_target": .string("int(value * 255 / 100)"),
        ])
        try await client.set("ui.slider.percent", .double(100))
        try await assertValues(["dev.volume.level": .byte(255)])
        try await client.set("dev.volume.level", .byte(51))
        try await assertValues(["ui.slider.percent": .double(20)])
    }

    // MARK: Directions

    func testDirectionFromFlowsOnlyFromToIntoKey() async throws {
        try await create([("view.on", "b", .boolean(false)), ("model.on", "b", .boolean(true))])
        let modelBefore = try await snapshot(["model.on"])
        try await bindKey("view.on", to: "model.on", ["direction": .string("from")])
        try await assertValues(["view.on": .boolean(true)], "the initial sync goes from `to` into `key`")
        let modelAfter = try await snapshot(["model.on"])
        XCTAssertEqual(modelAfter, modelBefore)

        let changes = try await recordAllChanges()
        try await client.set("view.on", .boolean(false))
        try await assertValues(["model.on": .boolean(true)], "direction=from carried a change of key into to")
        try await client.set("model.on", .boolean(false))
        try await client.set("model.on", .boolean(true))
        try await assertValues(["view.on": .boolean(true)])
        let signals = try await settle(changes)
        XCTAssertEqual(Self.history(of: "view.on", in: signals), [.boolean(false), .boolean(true)])
        XCTAssertEqual(Self.history(of: "model.on", in: signals), [.boolean(false), .boolean(true)])
    }

    func testDirectionToFlowsOnlyFromKeyIntoToAndSyncsThatWay() async throws {
        try await create([("view.on", "b", .boolean(true)), ("model.on", "b", .boolean(false))])
        let viewBefore = try await snapshot(["view.on"])
        let changes = try await recordAllChanges()
        let path = try await bindKey("view.on", to: "model.on", ["direction": .string("to")])
        try await assertValues(["model.on": .boolean(true)], "direction=to: the initial sync goes from key into to")
        let viewAfter = try await snapshot(["view.on"])
        XCTAssertEqual(viewAfter, viewBefore, "direction=to wrote to key at bind time")

        try await client.set("model.on", .boolean(false))
        try await assertValues(["view.on": .boolean(true)], "direction=to carried a change of to into key")
        try await client.set("view.on", .boolean(false))
        try await client.set("view.on", .boolean(true))
        try await assertValues(["model.on": .boolean(true)])
        let signals = try await settle(changes)
        XCTAssertEqual(Self.history(of: "model.on", in: signals), [.boolean(true), .boolean(false), .boolean(true)])
        XCTAssertEqual(Self.history(of: "view.on", in: signals), [.boolean(false), .boolean(true)])
        let direction = try await bindingProperty(path, "Direction")
        XCTAssertEqual(direction, .string("to"))
    }

    // MARK: Chains and cycles

    func testChainOfOneWayBindingsCarriesAChangeToTheEndOnly() async throws {
        try await create([("chain.a.v", "i", .int32(0)), ("chain.b.v", "i", .int32(0)), ("chain.c.v", "i", .int32(0))])
        // a → b → c
        try await bindKey("chain.b.v", to: "chain.a.v", ["direction": .string("from")])
        try await bindKey("chain.c.v", to: "chain.b.v", ["direction": .string("from")])
        let changes = try await recordAllChanges()
        try await client.set("chain.a.v", .int32(3))
        try await assertValues(["chain.a.v": .int32(3), "chain.b.v": .int32(3), "chain.c.v": .int32(3)])
        try await client.set("chain.c.v", .int32(9))
        try await assertValues(["chain.a.v": .int32(3), "chain.b.v": .int32(3), "chain.c.v": .int32(9)])
        try await client.set("chain.b.v", .int32(4))
        try await assertValues(["chain.a.v": .int32(3), "chain.b.v": .int32(4), "chain.c.v": .int32(4)])
        let signals = try await settle(changes)
        XCTAssertEqual(Self.history(of: "chain.a.v", in: signals), [.int32(3)])
        XCTAssertEqual(Self.history(of: "chain.b.v", in: signals), [.int32(3), .int32(4)])
        XCTAssertEqual(Self.history(of: "chain.c.v", in: signals), [.int32(3), .int32(9), .int32(4)])
    }

    func testTwoWayChainCarriesAChangeFromEitherEnd() async throws {
        try await create([("chain.a.v", "s", .string("")), ("chain.b.v", "s", .string("")), ("chain.c.v", "s", .string(""))])
        try await bindKey("chain.b.v", to: "chain.a.v")
        try await bindKey("chain.c.v", to: "chain.b.v")
        let changes = try await recordAllChanges()
        try await client.set("chain.c.v", .string("from c"))
        try await assertValues(["chain.a.v": .string("from c"), "chain.b.v": .string("from c")])
        try await client.set("chain.a.v", .string("from a"))
        try await assertValues(["chain.b.v": .string("from a"), "chain.c.v": .string("from a")])
        let signals = try await settle(changes)
        XCTAssertEqual(signals.count, 6, "one signal per object per change: \(signals)")
    }

    func testCycleOfThreeBindingsSettlesInOneSetWithOneSignalEach() async throws {
        try await create([("loop.a.v", "i", .int32(0)), ("loop.b.v", "i", .int32(0)), ("loop.c.v", "i", .int32(0))])
        try await bindKey("loop.a.v", to: "loop.b.v")
        try await bindKey("loop.b.v", to: "loop.c.v")
        try await bindKey("loop.c.v", to: "loop.a.v")
        let changes = try await recordAllChanges()

        try await client.set("loop.a.v", .int32(5))
        try await assertValues(["loop.a.v": .int32(5), "loop.b.v": .int32(5), "loop.c.v": .int32(5)])
        try await client.set("loop.c.v", .int32(7))
        try await assertValues(["loop.a.v": .int32(7), "loop.b.v": .int32(7), "loop.c.v": .int32(7)])
        try await client.set("loop.b.v", .int32(7))

        let signals = try await settle(changes)
        for key in ["loop.a.v", "loop.b.v", "loop.c.v"] {
            XCTAssertEqual(Self.history(of: key, in: signals), [.int32(5), .int32(7)], key)
        }
        XCTAssertEqual(signals.count, 6, "\(signals)")
    }

    func testCycleWithTransformsThatAreNotInversesTerminates() async throws {
        try await create([("loop.a.v", "i", .int32(0)), ("loop.b.v", "i", .int32(0)), ("loop.c.v", "i", .int32(0))])
        // Each hop adds one, both ways: a naive propagation would never stop.
        for (key, to) in [("loop.a.v", "loop.b.v"), ("loop.b.v", "loop.c.v"), ("loop.c.v", "loop.a.v")] {
            try await bindKey(key, to: to, ["to_key": .string("value + 1"), "to_target": .string("value + 1")])
        }
        let changes = try await recordAllChanges()
        try await client.set("loop.a.v", .int32(100))
        let settled = try await values(["loop.a.v", "loop.b.v", "loop.c.v"])
        XCTAssertEqual(settled["loop.a.v"], .int32(100), "the key that was Set keeps its value")
        let signals = try await settle(changes)
        for key in ["loop.a.v", "loop.b.v", "loop.c.v"] {
            let history = Self.history(of: key, in: signals)
            XCTAssertLessThanOrEqual(history.count, 1, "\(key) changed more than once in one Set: \(signals)")
            if let last = history.last { XCTAssertEqual(last, settled[key], key) }
        }
    }

    // MARK: Apply and Reset

    func testApplyOfSeveralBoundKeysPropagatesEachInOneTransaction() async throws {
        try await create([("left.a", "i", .int32(0)), ("left.c", "s", .string("")),
                          ("right.b", "i", .int32(0)), ("right.d", "s", .string(""))])
        try await bindKey("right.b", to: "left.a")
        try await bindKey("right.d", to: "left.c", ["to_key": .string("upper(value)"), "to_target": .string("lower(value)")])
        let changes = try await recordAllChanges()
        try await client.apply(set: [("left.a", .int32(1)), ("left.c", .string("hello"))])
        try await assertValues(["right.b": .int32(1), "right.d": .string("HELLO")])
        let signals = try await settle(changes)
        XCTAssertEqual(signals.count, 2, "one signal per object: \(signals)")
        XCTAssertEqual(signals.first { $0.group == "left" }?.changed, ["a": .int32(1), "c": .string("hello")])
        XCTAssertEqual(signals.first { $0.group == "right" }?.changed, ["b": .int32(1), "d": .string("HELLO")])
    }

    func testResetPropagatesTheDefault() async throws {
        try await create([("ui.volume.level", "u", .uint32(10)), ("settings.volume", "u", .uint32(50))])
        try await bindKey("ui.volume.level", to: "settings.volume")
        try await assertValues(["ui.volume.level": .uint32(50)])
        try await client.set("ui.volume.level", .uint32(70))
        try await assertValues(["settings.volume": .uint32(70)])

        let changes = try await recordAllChanges()
        try await client.reset("settings.volume")
        try await assertValues(["settings.volume": .uint32(50), "ui.volume.level": .uint32(50)], "Reset of `to` reaches key")
        try await client.reset("ui.volume.level")
        try await assertValues(["ui.volume.level": .uint32(10), "settings.volume": .uint32(10)], "Reset of key reaches `to`")
        let listed = try await client.list(prefix: "ui.volume.level").first
        XCTAssertEqual(listed?.metadata["is_set"], .boolean(false), "the reset side reads its default")
        let signals = try await settle(changes)
        XCTAssertEqual(Self.history(of: "ui.volume.level", in: signals), [.uint32(50), .uint32(10)])
        XCTAssertEqual(Self.history(of: "settings.volume", in: signals), [.uint32(50), .uint32(10)])
    }

    /// An Apply that names both sides of a binding must not leave them disagreeing: either one
    /// value wins on both sides, or the Apply is refused and nothing changes.
    func testApplyThatSetsBothSidesOfABindingNeverLeavesThemDisagreeing() async throws {
        try await create([("left.a", "i", .int32(0)), ("right.b", "i", .int32(0))])
        try await bindKey("right.b", to: "left.a")
        do {
            try await client.apply(set: [("left.a", .int32(1)), ("right.b", .int32(2))])
            let after = try await values(["left.a", "right.b"])
            XCTAssertEqual(after["left.a"], after["right.b"], "Apply left the two sides of a binding disagreeing: \(after)")
        } catch let error as DBusError {
            let after = try await values(["left.a", "right.b"])
            XCTAssertEqual(after, ["left.a": .int32(0), "right.b": .int32(0)], "a refused Apply changed something (\(error))")
        }
    }

    /// Re-registering a key with another default (`registerDefaults`) changes the value clients
    /// see when none is stored; like any other change, it must reach the other side.
    func testChangedDefaultOfABoundKeyReachesTheOtherSide() async throws {
        try await create([("model.level", "i", .int32(1)), ("view.level", "i", .int32(0))])
        try await bindKey("view.level", to: "model.level")
        try await assertValues(["view.level": .int32(1)])
        let changes = try await recordAllChanges()
        try await client.create("model.level", "i", default: .int32(5))
        try await assertValues(["model.level": .int32(5), "view.level": .int32(5)],
                               "a new registered default of `to` did not reach the bound key")
        let signals = try await settle(changes)
        XCTAssertEqual(Self.history(of: "view.level", in: signals), [.int32(5)])
    }

    func testCompareAndSetPropagates() async throws {
        try await create([("ui.count", "t", .uint64(0)), ("model.count", "t", .uint64(0))])
        try await bindKey("ui.count", to: "model.count")
        let current = try await client.getWithRevision("model.count")
        try await client.compareAndSet("model.count", revision: current.revision, .uint64(41))
        try await assertValues(["ui.count": .uint64(41)])
    }

    // MARK: Binding objects

    func testBindingObjectDescribesTheBindingAndIsAnnounced() async throws {
        try await create([("ui.power.label", "s", .string("Off")), ("dev.power.digit", "s", .string("0"))])
        let objects = try await recordObjects()
        let path = try await bindKey("ui.power.label", to: "dev.power.digit", [
            "direction": .string("both"), "to_key": .string(#"value == "1" ? "On" : "Off""#),
        ])
        XCTAssertTrue(path.hasPrefix(Self.bindingsPath + "/"), path)
        let expected: [String: DBusValue] = [
            "Key": .string("ui.power.label"), "To": .string("dev.power.digit"), "Direction": .string("both"),
            "Persistent": .boolean(false), "ToKey": .string(#"value == "1" ? "On" : "Off""#), "ToTarget": .string(""),
            "Owner": .string(client.connection.uniqueName),
        ]
        for (name, value) in expected {
            let actual = try await bindingProperty(path, name)
            XCTAssertEqual(actual, value, name)
        }
        let all = try await client.call(at: path, PropBusAPI.properties, "GetAll", [.string(Self.bindingInterface)])
        XCTAssertEqual(all.first?.stringKeyedEntries?.mapValues(\.unwrappingVariantOnce), expected)

        let signals = await objects.wait(count: 1)
        XCTAssertEqual(signals.first?.member, "InterfacesAdded")
        XCTAssertEqual(signals.first?.arguments.first, .objectPath(path))
        let announced = signals.first?.arguments.dropFirst().first?.stringKeyedEntries?[Self.bindingInterface]?
            .stringKeyedEntries?.mapValues(\.unwrappingVariantOnce)
        XCTAssertEqual(announced, expected, "InterfacesAdded should carry the binding's properties")

        let listed = try await listBindings()
        XCTAssertEqual(listed.map(\.path), [path])
        XCTAssertEqual(listed.first?.key, "ui.power.label")
        XCTAssertEqual(listed.first?.to, "dev.power.digit")
        XCTAssertEqual(listed.first?.options["direction"], .string("both"))
        XCTAssertEqual(listed.first?.options["persistent"], .boolean(false))
        XCTAssertEqual(listed.first?.options["to_key"], .string(#"value == "1" ? "On" : "Off""#))

        let xml = try await client.introspect(path)
        XCTAssertTrue(xml.contains(#"<interface name="org.propbus.PropBus1.Binding">"#), xml)
        XCTAssertTrue(xml.contains(#"<property name="Key" type="s" access="read">"#), xml)
        let managed = try await client.call(PropBusAPI.objectManager, "GetManagedObjects")
        XCTAssertTrue("\(managed)".contains(path), "GetManagedObjects does not list the binding: \(managed)")
    }

    func testUnbindStopsPropagationAndRemovesTheObject() async throws {
        try await create([("ui.switch.on", "b", .boolean(false)), ("settings.someBoolKey", "b", .boolean(false))])
        let path = try await bindKey("ui.switch.on", to: "settings.someBoolKey")
        let objects = try await recordObjects()
        try await unbind(path)
        try await client.set("settings.someBoolKey", .boolean(true))
        try await assertValues(["ui.switch.on": .boolean(false)], "a change crossed an ended binding")
        try await client.set("ui.switch.on", .boolean(true))
        try await client.set("settings.someBoolKey", .boolean(false))
        try await assertValues(["ui.switch.on": .boolean(true)])
        let signals = await objects.wait(count: 1)
        XCTAssertEqual(signals.first?.arguments, [.objectPath(path), .array(of: .string, [.string(Self.bindingInterface)])])
        let listed = try await listBindings()
        XCTAssertEqual(listed, [])
        await assertDBusError(PropBusAPI.standard("UnknownObject")) { try await self.bindingProperty(path, "Key") }
        await assertDBusError(PropBusAPI.standard("UnknownObject"), containing: [path]) { try await self.unbind(path) }
    }

    func testDeletingABoundKeyEndsTheBinding() async throws {
        try await create([("ui.switch.on", "b", .boolean(false)), ("settings.someBoolKey", "b", .boolean(false))])
        let path = try await bindKey("ui.switch.on", to: "settings.someBoolKey")
        let objects = try await recordObjects()
        try await client.delete("settings.someBoolKey")
        let signals = await objects.wait { $0.contains { $0.arguments.first == .objectPath(path) } }
        XCTAssertTrue(signals.contains { $0.member == "InterfacesRemoved" && $0.arguments.first == .objectPath(path) }, "\(signals)")
        let listed = try await listBindings()
        XCTAssertEqual(listed, [])
        // A key created again under the same name is not bound.
        try await client.create("settings.someBoolKey", "b", default: .boolean(false))
        try await client.set("settings.someBoolKey", .boolean(true))
        try await assertValues(["ui.switch.on": .boolean(false)])
        try await client.set("ui.switch.on", .boolean(true))
        try await client.set("settings.someBoolKey", .boolean(false))
        try await assertValues(["ui.switch.on": .boolean(true)])
    }

    func testDeletingTheFollowingKeyEndsTheBindingToo() async throws {
        try await create([("ui.switch.on", "b", .boolean(false)), ("settings.someBoolKey", "b", .boolean(false))])
        try await bindKey("ui.switch.on", to: "settings.someBoolKey")
        try await client.delete("ui.switch.on")
        let listed = try await listBindings()
        XCTAssertEqual(listed, [])
        try await client.set("settings.someBoolKey", .boolean(true))
        try await assertValues(["settings.someBoolKey": .boolean(true)])
    }
}
