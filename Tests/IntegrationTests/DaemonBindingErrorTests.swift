import DBus
import Foundation
import XCTest

/// Atomic propagation (docs/channels.md) and the errors of Bind/Unbind: a Set and everything it
/// propagates either all happen or none does, with no signal, and every refusal names what it
/// refused and why.
final class DaemonBindingErrorTests: DaemonBindingTestCase, @unchecked Sendable {
    /// Runs `body`, which must fail with `name`, and asserts that `keys` kept their values,
    /// revisions and stored state, and that nothing was signalled.
    private func assertRejectedAtomically(_ name: String, containing fragments: [String], keys: [String],
                                          file: StaticString = #filePath, line: UInt = #line,
                                          _ body: () async throws -> Void) async throws {
        let before = try await snapshot(keys)
        let changes = try await recordAllChanges()
        await assertDBusError(name, containing: fragments, file: file, line: line, body)
        let after = try await snapshot(keys)
        XCTAssertEqual(after, before, "a rejected write changed something", file: file, line: line)
        let signals = try await settle(changes, file: file, line: line)
        XCTAssertEqual(signals, [], "a rejected write emitted PropertiesChanged", file: file, line: line)
    }

    // MARK: Rejected propagation

    func testValueThatDoesNotFitTheOtherSideIsRejectedAtomically() async throws {
        try await create([("ui.level", "y", .byte(0)), ("dev.volume", "i", .int32(0))])
        try await bindKey("ui.level", to: "dev.volume")
        try await client.set("dev.volume", .int32(7))
        try await assertValues(["ui.level": .byte(7)])

        try await assertRejectedAtomically(PropBusAPI.error("TransformFailed"), containing: ["300 does not fit 'byte'", "ui.level"],
                                           keys: ["ui.level", "dev.volume"]) {
            try await self.client.set("dev.volume", .int32(300))
        }
        try await assertRejectedAtomically(PropBusAPI.error("TransformFailed"), containing: ["-1 does not fit 'byte'"],
                                           keys: ["ui.level", "dev.volume"]) {
            try await self.client.set("dev.volume", .int32(-1))
        }
        // The binding still works after a rejection.
        try await client.set("dev.volume", .int32(255))
        try await assertValues(["ui.level": .byte(255)])
        try await client.set("ui.level", .byte(1))
        try await assertValues(["dev.volume": .int32(1)])
    }

    func testTransformThatFailsForSomeInputRejectsTheSetAtomically() async throws {
        try await create([("ui.count", "i", .int32(0)), ("cfg.count", "s", .string("7"))])
        try await bindKey("ui.count", to: "cfg.count", ["to_key": .string("int(value)"), "to_target": .string("string(value)")])
        try await assertValues(["ui.count": .int32(7)])

        try await assertRejectedAtomically(PropBusAPI.error("TransformFailed"), containing: ["\"abc\"", "ui.count"],
                                           keys: ["ui.count", "cfg.count"]) {
            try await self.client.set("cfg.count", .string("abc"))
        }
        try await client.set("cfg.count", .string("12"))
        try await assertValues(["ui.count": .int32(12)])
        try await client.set("ui.count", .int32(-3))
        try await assertValues(["cfg.count": .string("-3")])
    }

    func testReadOnlyTargetRejectsTheSetAtomically() async throws {
        try await client.create("sensor.temp", "i", default: .int32(20), options: ["writable": .boolean(false)])
        try await create([("ui.temp", "i", .int32(0)), ("ui.shown", "i", .int32(0))])
        try await bindKey("ui.temp", to: "sensor.temp")
        try await assertValues(["ui.temp": .int32(20)], "a read-only `to` still leads at bind time")

        try await assertRejectedAtomically(PropBusAPI.error("ReadOnly"), containing: ["sensor.temp"],
                                           keys: ["ui.temp", "sensor.temp"]) {
            try await self.client.set("ui.temp", .int32(25))
        }
        // One way from a read-only key needs no write to it.
        try await bindKey("ui.shown", to: "sensor.temp", ["direction": .string("from")])
        try await assertValues(["ui.shown": .int32(20)])
        try await client.set("ui.shown", .int32(25))
        try await assertValues(["ui.shown": .int32(25), "sensor.temp": .int32(20)])
    }

    func testRangeAndChoicesOfTheTargetRejectTheSetAtomically() async throws {
        try await client.create("dev.brightness", "u", default: .uint32(50), options: ["maximum": .uint32(100)])
        try await client.create("dev.mode", "s", default: .string("auto"),
                                options: ["choices": .array(of: .variant, [.variant(.string("auto")), .variant(.string("manual"))])])
        try await create([("ui.brightness", "u", .uint32(0)), ("ui.mode", "s", .string(""))])
        try await bindKey("ui.brightness", to: "dev.brightness")
        try await bindKey("ui.mode", to: "dev.mode")

        try await assertRejectedAtomically(PropBusAPI.error("OutOfRange"), containing: ["dev.brightness", "150"],
                                           keys: ["ui.brightness", "dev.brightness"]) {
            try await self.client.set("ui.brightness", .uint32(150))
        }
        try await assertRejectedAtomically(PropBusAPI.error("InvalidValue"), containing: ["dev.mode", "turbo"],
                                           keys: ["ui.mode", "dev.mode"]) {
            try await self.client.set("ui.mode", .string("turbo"))
        }
        try await client.set("ui.mode", .string("manual"))
        try await assertValues(["dev.mode": .string("manual")])
    }

    func testWrongTypeOnABoundKeyIsRefusedBeforeAnythingPropagates() async throws {
        try await create([("ui.switch.on", "b", .boolean(false)), ("settings.someBoolKey", "b", .boolean(false))])
        try await bindKey("ui.switch.on", to: "settings.someBoolKey")
        try await assertRejectedAtomically(PropBusAPI.standard("InvalidArgs"), containing: ["ui.switch.on", "'b'", "'s'"],
                                           keys: ["ui.switch.on", "settings.someBoolKey"]) {
            try await self.client.set("ui.switch.on", .string("true"))
        }
    }

    func testRejectionAtTheFarEndOfAChainLeavesEveryKeyUnchanged() async throws {
        try await create([("chain.a", "i", .int32(1)), ("chain.b", "i", .int32(1)), ("chain.c", "y", .byte(1))])
        try await bindKey("chain.b", to: "chain.a")
        try await bindKey("chain.c", to: "chain.b")
        try await assertRejectedAtomically(PropBusAPI.error("TransformFailed"), containing: ["300", "'byte'", "chain.c"],
                                           keys: ["chain.a", "chain.b", "chain.c"]) {
            try await self.client.set("chain.a", .int32(300))
        }
        try await client.set("chain.a", .int32(200))
        try await assertValues(["chain.b": .int32(200), "chain.c": .byte(200)])
    }

    func testRejectionInsideACycleLeavesEveryKeyUnchanged() async throws {
        try await create([("loop.a", "i", .int32(1)), ("loop.b", "i", .int32(1)), ("loop.c", "y", .byte(1))])
        try await bindKey("loop.a", to: "loop.b")
        try await bindKey("loop.b", to: "loop.c")
        try await bindKey("loop.c", to: "loop.a")
        try await assertRejectedAtomically(PropBusAPI.error("TransformFailed"), containing: ["300"],
                                           keys: ["loop.a", "loop.b", "loop.c"]) {
            try await self.client.set("loop.b", .int32(300))
        }
    }

    func testApplyWhosePropagationIsRejectedChangesNothing() async throws {
        try await create([("ui.level", "y", .byte(0)), ("dev.volume", "i", .int32(0)), ("free.note", "s", .string(""))])
        try await bindKey("ui.level", to: "dev.volume")
        try await assertRejectedAtomically(PropBusAPI.error("TransformFailed"), containing: ["300"],
                                           keys: ["ui.level", "dev.volume", "free.note"]) {
            try await self.client.apply(set: [("free.note", .string("written")), ("dev.volume", .int32(300))])
        }
        try await assertRejectedAtomically(PropBusAPI.error("TransformFailed"), containing: ["300"],
                                           keys: ["ui.level", "dev.volume", "free.note"]) {
            try await self.client.apply(set: [("dev.volume", .int32(300))], reset: ["free.note"])
        }
    }

    // MARK: Refused bindings

    func testBindWhoseInitialValueCannotBeMappedIsRefusedAndLeavesNoBinding() async throws {
        try await create([("ui.level", "y", .byte(3)), ("dev.volume", "i", .int32(300))])
        let objects = try await recordObjects()
        try await assertRejectedAtomically(PropBusAPI.error("TransformFailed"), containing: ["300 does not fit 'byte'"],
                                           keys: ["ui.level", "dev.volume"]) {
            try await self.bindKey("ui.level", to: "dev.volume")
        }
        let listed = try await listBindings()
        XCTAssertEqual(listed, [])
        try await client.set("dev.volume", .int32(4))
        try await assertValues(["ui.level": .byte(3)], "a refused binding propagates")
        XCTAssertEqual(objects.signals.map(\.member), [], "a refused binding was announced")
    }

    func testBindToAReadOnlyFollowingKeyIsRefused() async throws {
        try await client.create("sensor.temp", "i", default: .int32(20), options: ["writable": .boolean(false)])
        try await client.create("ui.temp", "i", default: .int32(0))
        try await assertRejectedAtomically(PropBusAPI.error("ReadOnly"), containing: ["sensor.temp"], keys: ["sensor.temp", "ui.temp"]) {
            try await self.bindKey("sensor.temp", to: "ui.temp")
        }
        let listed = try await listBindings()
        XCTAssertEqual(listed, [])
    }

    // Which transforms and types a binding may have, and how a malformed expression is named,
    // are the core's: PropBusTests.BindOptionsTests pins them on the model.

    func testBindArgumentsAreChecked() async throws {
        try await create([("ui.switch.on", "b", .boolean(false)), ("settings.someBoolKey", "b", .boolean(false))])
        await assertDBusError(PropBusAPI.error("UnknownKey"), containing: ["ui.missing"]) {
            try await self.bindKey("ui.missing", to: "settings.someBoolKey")
        }
        await assertDBusError(PropBusAPI.error("UnknownKey"), containing: ["settings.missing"]) {
            try await self.bindKey("ui.switch.on", to: "settings.missing")
        }
        await assertDBusError(PropBusAPI.error("InvalidKey")) {
            try await self.bindKey("ui.switch.on", to: "no-dots here")
        }
        await assertDBusError(PropBusAPI.standard("InvalidArgs"), containing: ["ui.switch.on", "itself"]) {
            try await self.bindKey("ui.switch.on", to: "ui.switch.on")
        }
        await assertDBusError(PropBusAPI.standard("InvalidArgs"), containing: ["'bogus'", "direction", "to_key", "to_target", "persistent"]) {
            try await self.bindKey("ui.switch.on", to: "settings.someBoolKey", ["bogus": .boolean(true)])
        }
        await assertDBusError(PropBusAPI.standard("InvalidArgs"), containing: ["direction", "both, from, to", "sideways"]) {
            try await self.bindKey("ui.switch.on", to: "settings.someBoolKey", ["direction": .string("sideways")])
        }
        await assertDBusError(PropBusAPI.standard("InvalidArgs"), containing: ["persistent", "(b)"]) {
            try await self.bindKey("ui.switch.on", to: "settings.someBoolKey", ["persistent": .string("yes")])
        }
        await assertDBusError(PropBusAPI.standard("InvalidArgs"), containing: ["to_key", "(s)"]) {
            try await self.bindKey("ui.switch.on", to: "settings.someBoolKey", ["to_key": .int32(1)])
        }
        let listed = try await listBindings()
        XCTAssertEqual(listed, [], "a refused Bind left a binding")
        await assertDBusError(PropBusAPI.standard("UnknownObject"), containing: ["/org/propbus/PropBus1/bindings/99"]) {
            try await self.unbind(Self.bindingsPath + "/99")
        }
        await assertDBusError(PropBusAPI.standard("UnknownObject")) {
            try await self.unbind(PropBusAPI.rootPath + "/ui/switch")
        }
    }
}
