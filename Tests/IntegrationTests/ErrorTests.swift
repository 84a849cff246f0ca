import DBus
import PropBus
import XCTest

/// Every error of docs/dbus-api.md's "Errors" this daemon can raise today: the right D-Bus name, a message naming the
/// key and saying what was expected, and nothing changed.
final class ErrorTests: DaemonTestCase {
    private let invalidKey = PropBusAPI.error("InvalidKey")
    private let invalidArgs = PropBusAPI.standard("InvalidArgs")

    // MARK: Keys

    func testKeyWithoutAGroupIsRefusedWithInvalidKeyQuotingTheRule() async throws {
        await assertDBusError(invalidKey, containing: ["'nodot'", Key.rule]) {
            try await self.client.create("nodot", "b", default: .boolean(false))
        }
    }

    func testKeyWithABadCharacterIsRefusedNamingTheCharacter() async throws {
        await assertDBusError(invalidKey, containing: ["ui.swi-tch.on", "'-'", "[A-Za-z0-9_]+"]) {
            try await self.client.create("ui.swi-tch.on", "b", default: .boolean(false))
        }
    }

    func testNonASCIICharacterInAKeyIsNamedWholeNotAsOneOfItsBytes() async throws {
        // A refused key's message quotes the offending character whole; 'ü' is one character of two bytes.
        await assertDBusError(invalidKey, containing: ["'ü'", "[A-Za-z0-9_]+"]) {
            try await self.client.create("ui.sch\u{00FC}ler.on", "b", default: .boolean(false))
        }
    }

    func testOtherKeyRuleViolationsAreInvalidKey() async throws {
        for bad in ["", "ui..on", ".ui.on", "ui.", "ui.9lives", "ui switch.on", String(repeating: "a", count: 250) + ".named"] {
            await assertDBusError(invalidKey, containing: [Key.rule]) {
                try await self.client.create(bad, "b", default: .boolean(false))
            }
        }
        let listed = try await client.list()
        XCTAssertEqual(listed.map(\.key), [], "a refused key was created")
    }

    func testKeyOfExactly255BytesIsAccepted() async throws {
        let key = "g." + String(repeating: "k", count: 253)
        try await client.create(key, "b", default: .boolean(true))
        let listed = try await client.list()
        XCTAssertEqual(listed.map(\.key), [key])
    }

    func testInvalidKeyIsRefusedByApplyAndDelete() async throws {
        await assertDBusError(invalidKey, containing: ["bad-key"]) {
            try await self.client.apply(set: [("bad-key.x", .int32(1))])
        }
        await assertDBusError(invalidKey, containing: ["nodot"]) {
            try await self.client.delete("nodot")
        }
    }

    // MARK: Unknown keys

    func testUnknownKeyIsNamedByDeleteResetApplyAndGetWithRevision() async throws {
        try await client.create("known.key", "i", default: .int32(0))
        let unknownKey = PropBusAPI.error("UnknownKey")
        await assertDBusError(unknownKey, containing: ["no.such"]) { try await self.client.delete("no.such") }
        await assertDBusError(unknownKey, containing: ["known.missing"]) { try await self.client.reset("known.missing") }
        await assertDBusError(unknownKey, containing: ["known.missing"]) { try await self.client.getWithRevision("known.missing") }
        await assertDBusError(unknownKey, containing: ["known.missing"]) {
            try await self.client.compareAndSet("known.missing", revision: 0, .int32(1))
        }
        await assertDBusError(unknownKey, containing: ["other.thing"]) {
            try await self.client.apply(set: [("known.key", .int32(5)), ("other.thing", .int32(1))])
        }
        await assertDBusError(unknownKey, containing: ["other.thing"]) {
            try await self.client.apply(set: [], reset: ["other.thing"])
        }
        let value = try await client.get("known.key")
        XCTAssertEqual(value, .int32(0), "a failed Apply changed a key")
    }

    func testUnknownPropertyOfAnExistingGroupIsTheStandardUnknownProperty() async throws {
        try await client.create("known.key", "i", default: .int32(0))
        await assertDBusError(PropBusAPI.standard("UnknownProperty"), containing: ["missing"]) {
            try await self.client.get("known.missing")
        }
        await assertDBusError(PropBusAPI.standard("UnknownProperty"), containing: ["missing"]) {
            try await self.client.set("known.missing", .int32(1))
        }
    }

    // MARK: Types

    func testRegisteringAgainWithAnotherTypeIsTypeMismatch() async throws {
        try await client.create("ui.switch.on", "b", default: .boolean(false))
        await assertDBusError(PropBusAPI.error("TypeMismatch"), containing: ["ui.switch.on", "'b'", "'i'"]) {
            try await self.client.create("ui.switch.on", "i", default: .int32(0))
        }
        let listed = try await client.list(prefix: "ui.switch.on")
        XCTAssertEqual(listed.map(\.type), ["b"])
    }

    func testRegisteringAgainWithTheSameTypeUpdatesMetadataAndKeepsTheValue() async throws {
        try await client.create("ui.title", "s", default: .string("old default"), options: ["description": .string("first")])
        try await client.set("ui.title", .string("stored"))
        try await client.create("ui.title", "s", default: .string("new default"), options: ["description": .string("second")])
        let listed = try await client.list(prefix: "ui.title")
        XCTAssertEqual(listed.first?.value, .string("stored"))
        XCTAssertEqual(listed.first?.metadata["description"], .string("second"))
        XCTAssertEqual(listed.first?.metadata["default"], .string("new default"))
        try await client.reset("ui.title")
        let reset = try await client.get("ui.title")
        XCTAssertEqual(reset, .string("new default"))
    }

    func testSetOfAnotherTypeIsInvalidArgsNamingKeyAndBothTypes() async throws {
        try await client.create("ui.switch.on", "b", default: .boolean(false))
        await assertDBusError(invalidArgs) {
            try await self.client.set("ui.switch.on", .string("yes"))
        }
        do {
            try await client.set("ui.switch.on", .string("yes"))
        } catch let error as DBusError {
            XCTAssertEqual(error.message, "property ui.switch.on has type 'b', got 's'")
        }
        let value = try await client.get("ui.switch.on")
        XCTAssertEqual(value, .boolean(false))
    }

    func testBusctlAndDbusSendShowTheTypeError() async throws {
        try await client.create("ui.switch.on", "b", default: .boolean(false))
        let busctl = try await busctl(["set-property", PropBusAPI.busName, PropBusAPI.rootPath + "/ui/switch", PropBusAPI.values, "on", "s", "yes"])
        XCTAssertEqual(busctl.status, 1, "\(busctl)")
        XCTAssertTrue(busctl.stderr.contains("property ui.switch.on has type 'b', got 's'"), busctl.stderr)
        let dbusSend = try await dbusSend([PropBusAPI.rootPath + "/ui/switch", "\(PropBusAPI.properties).Set",
                                           "string:\(PropBusAPI.values)", "string:on", "variant:int32:1"])
        XCTAssertEqual(dbusSend.status, 1, "\(dbusSend)")
        XCTAssertTrue(dbusSend.stderr.contains("Error \(invalidArgs): property ui.switch.on has type 'b', got 'i'"), dbusSend.stderr)
    }

    func testCreateWithADefaultOfAnotherTypeIsInvalidArgs() async throws {
        await assertDBusError(invalidArgs, containing: ["ui.switch.on", "'b'", "'s'"]) {
            try await self.client.create("ui.switch.on", "b", default: .string("false"))
        }
    }

    func testCreateWithAnInvalidTypeIsInvalidArgs() async throws {
        for type in ["", "ii", "a", "a{vs}", "(", "z", String(repeating: "a", count: 40) + "i"] {
            await assertDBusError(invalidArgs, containing: ["bad.type"]) {
                try await self.client.create("bad.type", type, default: .int32(0))
            }
        }
    }

    func testUnknownCreateOptionIsInvalidArgs() async throws {
        await assertDBusError(invalidArgs, containing: ["ui.x", "colour"]) {
            try await self.client.create("ui.x", "i", default: .int32(0), options: ["colour": .string("red")])
        }
    }

    // MARK: Checks on values

    func testSetOfAReadOnlyPropertyIsReadOnly() async throws {
        try await client.create("sys.version", "s", default: .string("1.0"), options: ["writable": .boolean(false)])
        await assertDBusError(PropBusAPI.standard("PropertyReadOnly"), containing: ["sys.version"]) {
            try await self.client.set("sys.version", .string("2.0"))
        }
        await assertDBusError(PropBusAPI.error("ReadOnly"), containing: ["sys.version"]) {
            try await self.client.apply(set: [("sys.version", .string("2.0"))])
        }
        let value = try await client.get("sys.version")
        XCTAssertEqual(value, .string("1.0"))
        let listed = try await client.list(prefix: "sys.")
        XCTAssertEqual(listed.first?.metadata["writable"], .boolean(false))
    }

    func testValueOutsideMinimumAndMaximumIsOutOfRange() async throws {
        try await client.create("audio.volume", "i", default: .int32(5),
                                options: ["minimum": .int32(0), "maximum": .int32(10)])
        try await client.set("audio.volume", .int32(10))
        await assertDBusError(PropBusAPI.error("OutOfRange"), containing: ["audio.volume", "11"]) {
            try await self.client.set("audio.volume", .int32(11))
        }
        await assertDBusError(PropBusAPI.error("OutOfRange"), containing: ["audio.volume", "-1"]) {
            try await self.client.set("audio.volume", .int32(-1))
        }
        let value = try await client.get("audio.volume")
        XCTAssertEqual(value, .int32(10))
    }

    func testValueNotAmongTheChoicesIsInvalidValue() async throws {
        try await client.create("ui.theme", "s", default: .string("light"),
                                options: ["choices": .array(of: .variant, [.variant(.string("light")), .variant(.string("dark"))])])
        try await client.set("ui.theme", .string("dark"))
        await assertDBusError(PropBusAPI.error("InvalidValue"), containing: ["ui.theme", "purple", "light", "dark"]) {
            try await self.client.set("ui.theme", .string("purple"))
        }
        let value = try await client.get("ui.theme")
        XCTAssertEqual(value, .string("dark"))
    }

    func testCompareAndSetWithAStaleRevisionIsConflict() async throws {
        try await client.create("counter.hits", "t", default: .uint64(0))
        let first = try await client.getWithRevision("counter.hits")
        let next = try await client.compareAndSet("counter.hits", revision: first.revision, .uint64(1))
        XCTAssertNotEqual(next, first.revision)
        await assertDBusError(PropBusAPI.error("Conflict"), containing: ["counter.hits", "\(next)"]) {
            try await self.client.compareAndSet("counter.hits", revision: first.revision, .uint64(99))
        }
        let current = try await client.getWithRevision("counter.hits")
        XCTAssertEqual(current.value, .uint64(1))
        XCTAssertEqual(current.revision, next)
    }

    func testValueLargerThanTheDefaultOneMebibyteIsLimitsExceeded() async throws {
        try await client.create("blob.data", "ay", default: .bytes([]))
        try await client.set("blob.data", .bytes(Array(repeating: 7, count: 512 * 1024)))
        await assertDBusError(PropBusAPI.error("LimitsExceeded"), containing: ["blob.data"]) {
            try await self.client.set("blob.data", .bytes(Array(repeating: 1, count: 2 * 1024 * 1024)))
        }
        let value = try await client.get("blob.data")
        XCTAssertEqual(value, .bytes(Array(repeating: 7, count: 512 * 1024)))
    }

    func testMaxValueSizeOptionLimitsSetsAndDefaults() async throws {
        try await restartDaemon(arguments: ["--max-value-size", "64"])
        try await client.create("blob.text", "s", default: .string("short"))
        try await client.set("blob.text", .string(String(repeating: "x", count: 32)))
        await assertDBusError(PropBusAPI.error("LimitsExceeded"), containing: ["blob.text", "64"]) {
            try await self.client.set("blob.text", .string(String(repeating: "x", count: 1000)))
        }
        await assertDBusError(PropBusAPI.error("LimitsExceeded"), containing: ["blob.big"]) {
            try await self.client.create("blob.big", "s", default: .string(String(repeating: "y", count: 1000)))
        }
        let value = try await client.get("blob.text")
        XCTAssertEqual(value, .string(String(repeating: "x", count: 32)))
    }

    func testMaxPropertiesOptionLimitsTheNumberOfKeys() async throws {
        try await restartDaemon(arguments: ["--max-properties", "3"])
        for name in ["a", "b", "c"] {
            try await client.create("limit.\(name)", "i", default: .int32(0))
        }
        await assertDBusError(PropBusAPI.error("LimitsExceeded"), containing: ["limit.d", "3"]) {
            try await self.client.create("limit.d", "i", default: .int32(0))
        }
        // Registering an existing key again is not a new property.
        try await client.create("limit.a", "i", default: .int32(1))
        try await client.delete("limit.b")
        try await client.create("limit.d", "i", default: .int32(0))
        let keys = try await client.list().map(\.key)
        XCTAssertEqual(keys.sorted(), ["limit.a", "limit.c", "limit.d"])
    }

    // MARK: Apply is atomic

    func testApplyWithOneBadValueChangesNothing() async throws {
        try await client.create("form.name", "s", default: .string(""))
        try await client.create("form.age", "u", default: .uint32(0), options: ["maximum": .uint32(150)])
        try await client.create("form.agree", "b", default: .boolean(false))
        try await client.set("form.agree", .boolean(true))
        let changes = try await client.recordChanges(ofGroup: "form")
        await assertDBusError(invalidArgs, containing: ["form.agree", "'b'", "'s'"]) {
            try await self.client.apply(set: [("form.name", .string("Ada")), ("form.agree", .string("yes"))])
        }
        await assertDBusError(PropBusAPI.error("OutOfRange"), containing: ["form.age"]) {
            try await self.client.apply(set: [("form.name", .string("Ada")), ("form.age", .uint32(200))], reset: ["form.agree"])
        }
        let name = try await client.get("form.name")
        let agree = try await client.get("form.agree")
        XCTAssertEqual(name, .string(""))
        XCTAssertEqual(agree, .boolean(true))
        // Marker: the failed Applies emitted nothing before it.
        try await client.set("form.age", .uint32(1))
        let signals = await changes.wait(count: 1)
        XCTAssertEqual(signals.map(\.changed), [["age": .uint32(1)]])
    }

    func testApplySetsAndResetsTogether() async throws {
        try await client.create("form.name", "s", default: .string("nobody"))
        try await client.create("form.age", "u", default: .uint32(0))
        try await client.set("form.name", .string("Ada"))
        try await client.apply(set: [("form.age", .uint32(36))], reset: ["form.name"])
        let name = try await client.get("form.name")
        let age = try await client.get("form.age")
        XCTAssertEqual(name, .string("nobody"))
        XCTAssertEqual(age, .uint32(36))
    }
}
