import DBus
import XCTest

/// A write is a change when it changes the bytes: canonically equivalent strings are
/// different values, the same NaN is the same value, −0.0 is not 0.0, and `choices` match bytes.
final class ExactValueTests: DaemonTestCase {
    let precomposed = "\u{E9}", decomposed = "e\u{301}"

    private func bytes(_ value: DBusValue) -> [UInt8]? {
        if case .string(let text) = value { return Array(text.utf8) }
        return nil
    }

    private func bits(_ value: DBusValue) -> UInt64? {
        if case .double(let number) = value { return number.bitPattern }
        return nil
    }

    func testADecomposedStringOverItsPrecomposedFormIsStoredAndAnnounced() async throws {
        try await client.create("exact.name", "s", default: .string(precomposed))
        let changes = try await client.recordChanges(ofGroup: "exact")
        let before = try await client.getWithRevision("exact.name")
        try await client.set("exact.name", .string(decomposed))
        let after = try await client.getWithRevision("exact.name")
        XCTAssertEqual(bytes(after.value), Array(decomposed.utf8), "the new bytes are kept")
        XCTAssertGreaterThan(after.revision, before.revision)
        let signals = await changes.wait(count: 1)
        XCTAssertEqual(signals.first.flatMap { $0.changed["name"] }.flatMap(bytes), Array(decomposed.utf8))
        // busctl prints what the daemon holds, byte for byte (non-ASCII bytes as octal escapes).
        let printed = try await busctl(["get-property", PropBusAPI.busName, "/org/propbus/PropBus1/exact", PropBusAPI.values, "name"])
        XCTAssertEqual(printed.stdout, "s \"e\\314\\201\"\n", "\(printed)")
    }

    func testRewritingTheSameNaNIsNoChangeAndMinusZeroIsOne() async throws {
        try await client.create("exact.ratio", "d", default: .double(0))
        let changes = try await client.recordChanges(ofGroup: "exact")
        try await client.set("exact.ratio", .double(-0.0))
        let negative = try await client.getWithRevision("exact.ratio")
        XCTAssertEqual(bits(negative.value), (-0.0 as Double).bitPattern, "−0.0 over 0.0 is a change")
        try await client.set("exact.ratio", .double(.nan))
        let first = try await client.getWithRevision("exact.ratio")
        try await client.set("exact.ratio", .double(.nan))
        let second = try await client.getWithRevision("exact.ratio")
        XCTAssertEqual(second.revision, first.revision, "the same NaN again takes no new revision")
        // Barrier: a later write's signal arrives after any the second NaN could have caused.
        try await client.set("exact.ratio", .double(1))
        let signals = await changes.wait { $0.contains { $0.changed["ratio"] == .double(1) } }
        XCTAssertEqual(signals.count, 3, "−0.0, NaN once, then 1: \(signals)")
    }

    func testChoicesMatchTheBytesNotAnEquivalentForm() async throws {
        try await client.create("exact.pick", "s", default: .string(precomposed),
                                options: ["choices": .array(of: .variant, [.variant(.string(precomposed)), .variant(.string("b"))])])
        await assertDBusError(PropBusAPI.error("InvalidValue"), containing: ["exact.pick"]) {
            try await self.client.set("exact.pick", .string(self.decomposed))
        }
        let kept = try await client.get("exact.pick")
        XCTAssertEqual(bytes(kept), Array(precomposed.utf8))
    }
}
