import DBus
import Foundation
import XCTest

/// Leased overrides and ephemeral keys, end to end through the real
/// binaries: `Manager.Override`/`ReleaseOverride`, `propctl override`, CreateProperty's
/// `lifetime`. Absence checks use a barrier, never a sleep.
final class OverrideTests: DaemonTestCase, @unchecked Sendable {
    private func propctl(_ arguments: [String], timeout: TimeInterval = 15) async throws -> CommandResult {
        try await tool(BuildProducts.propctl, ["--address", bus.address] + arguments, timeout: timeout)
    }

    private func expectValue(_ key: String, _ expected: DBusValue, _ message: String = "", from reader: Client,
                             file: StaticString = #filePath, line: UInt = #line) async throws {
        let value = try await reader.get(key)
        XCTAssertEqual(value, expected, message, file: file, line: line)
    }

    /// `display.idleDelay` (u, default 300) with the user's value 600.
    private func makeIdleDelay() async throws {
        try await client.create("display.idleDelay", "u", default: .uint32(300))
        try await client.set("display.idleDelay", .uint32(600))
    }

    private func idleDelaySignals(_ recorder: SignalRecorder) -> [DBusValue] {
        recorder.signals.compactMap { $0.changed["idleDelay"] }
    }

    @discardableResult
    private func override(_ key: String, _ value: DBusValue, by holder: Client? = nil, ttl: Double? = nil) async throws -> UInt64 {
        let options: [String: DBusValue] = ttl.map { ["ttl": .double($0)] } ?? [:]
        let reply = try await (holder ?? client).call(PropBusAPI.manager, "Override", [.string(key), .variant(value), .vardict(options)])
        guard case .uint64(let handle)? = reply.first else { throw TestSetupError("Override answered \(reply)") }
        return handle
    }

    private func release(_ handle: UInt64, by holder: Client? = nil) async throws {
        try await (holder ?? client).call(PropBusAPI.manager, "ReleaseOverride", [.uint64(handle)])
    }

    func testOverrideOfAKilledPropctlEndsAndTheUsersValueReturnsWithOneSignalEachWay() async throws {
        try await makeIdleDelay()
        let recorder = try await client.recordChanges(ofGroup: "display")
        let holder = try ChildProcess(BuildProducts.propctl, ["--address", bus.address, "override", "display.idleDelay", "0", "--", "sleep", "600"],
                                      environment: bus.environment)
        addTeardownBlock { kill(-holder.pid, SIGKILL) }
        let started = await recorder.wait { _ in self.idleDelaySignals(recorder).contains(.uint32(0)) }
        try await expectValue("display.idleDelay", .uint32(0), "the override does not show: \(started) \(holder.stderr)", from: client)
        holder.signal(SIGKILL)
        _ = await recorder.wait { _ in self.idleDelaySignals(recorder).contains(.uint32(600)) }
        try await client.barrier()
        XCTAssertEqual(idleDelaySignals(recorder), [.uint32(0), .uint32(600)], "one signal each way")
        try await expectValue("display.idleDelay", .uint32(600), from: client)
    }

    func testOverrideWithACommandHoldsWhileItRunsAndExitsWithItsStatus() async throws {
        try await makeIdleDelay()
        let recorder = try await client.recordChanges(ofGroup: "display")
        let inside = "\(BuildProducts.propctl) --address '\(bus.address)' get display.idleDelay; exit 3"
        let result = try await propctl(["override", "display.idleDelay", "5", "--", "sh", "-c", inside])
        XCTAssertEqual(result.status, 3, "\(result)")
        XCTAssertEqual(result.stdout, "5\n", "the command saw the override, its output passed through: \(result)")
        _ = await recorder.wait { _ in self.idleDelaySignals(recorder).count >= 2 }
        try await client.barrier()
        XCTAssertEqual(idleDelaySignals(recorder), [.uint32(5), .uint32(600)])
        try await expectValue("display.idleDelay", .uint32(600), from: client)
    }

    func testPropctlOverrideWithoutACommandPrintsItsHandleAndReleasesOnSIGTERM() async throws {
        try await makeIdleDelay()
        let recorder = try await client.recordChanges(ofGroup: "display")
        let holder = try ChildProcess(BuildProducts.propctl, ["--address", bus.address, "override", "display.idleDelay", "1"],
                                      environment: bus.environment)
        _ = await recorder.wait { _ in self.idleDelaySignals(recorder).contains(.uint32(1)) }
        let printed = await eventually { UInt64(holder.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) != nil }
        XCTAssertTrue(printed, "no handle printed: \(holder.stdout) \(holder.stderr)")
        let describe = try await propctl(["describe", "display.idleDelay"])
        XCTAssertTrue(describe.stdout.contains("override") && describe.stdout.contains("propctl"), "describe names the holder: \(describe)")
        holder.signal(SIGTERM)
        let ended = await holder.waitForExit(timeout: 10)
        XCTAssertEqual(ended, .exited(0), holder.stderr)
        _ = await recorder.wait { _ in self.idleDelaySignals(recorder).contains(.uint32(600)) }
        try await expectValue("display.idleDelay", .uint32(600), from: client)
    }

    func testPropctlOverrideForADurationEndsByItselfAndExitsZero() async throws {
        try await makeIdleDelay()
        let recorder = try await client.recordChanges(ofGroup: "display")
        let result = try await propctl(["override", "display.idleDelay", "3", "--for", "1s"], timeout: 30)
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertNotNil(UInt64(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), "the handle: \(result)")
        _ = await recorder.wait { _ in self.idleDelaySignals(recorder).count >= 2 }
        try await client.barrier()
        XCTAssertEqual(idleDelaySignals(recorder), [.uint32(3), .uint32(600)])
        let bad = try await propctl(["override", "display.idleDelay", "3", "--for", "soon"])
        XCTAssertEqual(bad.status, 64, "\(bad)")
        XCTAssertTrue(bad.stderr.contains("--for expects a duration"), "\(bad)")
    }

    func testPropctlOverrideForADurationWithoutACommandIsSetAndLeft() async throws {
        try await makeIdleDelay()
        // An hour's override: propctl must not hold the terminal for it.
        let result = try await propctl(["override", "display.idleDelay", "3", "--for", "1h"], timeout: 10)
        XCTAssertEqual(result.status, 0, "\(result)")
        let handle = try XCTUnwrap(UInt64(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), "the handle: \(result)")
        try await expectValue("display.idleDelay", .uint32(3), "the override outlives propctl", from: client)
        try await release(handle)
        try await expectValue("display.idleDelay", .uint32(600), from: client)
    }

    func testTwoHoldersFallBackInOrderWhicheverEndsFirst() async throws {
        try await makeIdleDelay()
        let first = try await Client.connect(to: bus), second = try await Client.connect(to: bus)
        defer { first.close(); second.close() }
        let recorder = try await client.recordChanges(ofGroup: "display")
        let bottom = try await override("display.idleDelay", .uint32(10), by: first)
        let top = try await override("display.idleDelay", .uint32(20), by: second)
        XCTAssertNotEqual(bottom, top)
        try await expectValue("display.idleDelay", .uint32(20), "the latest wins", from: client)
        try await release(top, by: second)
        try await expectValue("display.idleDelay", .uint32(10), "ending the top falls back to the one below", from: client)
        // The bottom one ending while another holds changes nothing anyone sees.
        let third = try await override("display.idleDelay", .uint32(30), by: second)
        first.close()
        try await client.barrier()
        try await expectValue("display.idleDelay", .uint32(30), from: client)
        try await release(third, by: second)
        try await client.barrier()
        XCTAssertEqual(idleDelaySignals(recorder), [.uint32(10), .uint32(20), .uint32(10), .uint32(30), .uint32(600)])
        try await expectValue("display.idleDelay", .uint32(600), from: client)
    }

    func testAUserSetDuringAnOverrideSendsNoSignalAndShowsWhenItEnds() async throws {
        try await makeIdleDelay()
        let holder = try await Client.connect(to: bus)
        defer { holder.close() }
        let recorder = try await client.recordChanges(ofGroup: "display")
        let handle = try await override("display.idleDelay", .uint32(0), by: holder)
        try await client.set("display.idleDelay", .uint32(900))
        try await expectValue("display.idleDelay", .uint32(0), "the override still shows", from: client)
        try await client.barrier()
        XCTAssertEqual(idleDelaySignals(recorder), [.uint32(0)], "the effective value did not change: no signal")
        try await release(handle, by: holder)
        _ = await recorder.wait { _ in self.idleDelaySignals(recorder).count >= 2 }
        XCTAssertEqual(idleDelaySignals(recorder), [.uint32(0), .uint32(900)], "the user's new value shows when the override ends")
    }

    func testADumpTakenDuringAnOverrideSavesTheUsersValueAndLoadsItBack() async throws {
        try await makeIdleDelay()
        try await client.create("display.dim", "u", default: .uint32(30))
        let holder = try await Client.connect(to: bus)
        defer { holder.close() }
        let handle = try await override("display.idleDelay", .uint32(0), by: holder)
        try await override("display.dim", .uint32(1), by: holder)
        let dump = try await propctl(["dump", "display"])
        XCTAssertEqual(dump.status, 0, "\(dump)")
        let document = try JSONSerialization.jsonObject(with: Data(dump.stdout.utf8)) as? [String: Any]
        let properties = try XCTUnwrap(document?["properties"] as? [String: Any], dump.stdout)
        let idle = try XCTUnwrap(properties["display.idleDelay"] as? [String: Any], dump.stdout)
        XCTAssertEqual(idle["value"] as? Int, 600, "a dump is of the user's value, not the override's: \(dump.stdout)")
        XCTAssertEqual(idle["is_set"] as? Bool, true, dump.stdout)
        let dim = try XCTUnwrap(properties["display.dim"] as? [String: Any], dump.stdout)
        XCTAssertEqual(dim["value"] as? Int, 30, "an unset key under an override dumps its default: \(dump.stdout)")
        XCTAssertEqual(dim["is_set"] as? Bool, false, dump.stdout)

        // Loaded back while an override holds, the dumped value is compared with the user's
        // value, not the override's: 600 loaded over a user 5 is a change even though 600 shows.
        try await release(handle, by: holder)
        try await client.set("display.idleDelay", .uint32(5))
        let again = try await override("display.idleDelay", .uint32(600), by: holder)
        let load = try await runCommand(BuildProducts.propctl, ["--address", bus.address, "load", "-"], environment: bus.environment,
                                        stdin: dump.stdout, timeout: 15)
        XCTAssertEqual(load.status, 0, "\(load)")
        try await release(again, by: holder)
        try await expectValue("display.idleDelay", .uint32(600), "the loaded user value shows once the override ends", from: client)
    }

    func testATTLOverrideSurvivesADaemonRestartAndEndsOnItsOwn() async throws {
        try await makeIdleDelay()
        // Subscribed before the restart: the rule names the well-known name, which the new
        // daemon owns again, so its first signals are not missed.
        let recorder = try await client.recordChanges(ofGroup: "display")
        let handle = try await override("display.idleDelay", .uint32(7), ttl: 3)
        _ = await recorder.wait { _ in self.idleDelaySignals(recorder).contains(.uint32(7)) }
        try await restartDaemon(arguments: daemonArguments)
        // Without the override kept, the new daemon would read 600 at once and announce nothing.
        let ended = await recorder.wait(timeout: 20) { _ in self.idleDelaySignals(recorder).contains(.uint32(600)) }
        XCTAssertEqual(idleDelaySignals(recorder), [.uint32(7), .uint32(600)], "\(ended)")
        try await expectValue("display.idleDelay", .uint32(600), from: client)
        // Handles never repeat, also across restarts.
        let next = try await override("display.idleDelay", .uint32(8))
        XCTAssertGreaterThan(next, handle)
    }

    func testOverrideValuesAreCheckedAsASetsAre() async throws {
        try await client.create("display.mode", "s", default: .string("auto"),
                                options: ["choices": .array(of: .variant, [.variant(.string("auto")), .variant(.string("off"))])])
        try await client.create("display.level", "i", default: .int32(5), options: ["minimum": .variant(.int32(0)), "maximum": .variant(.int32(10))])
        await assertDBusError(PropBusAPI.error("OutOfRange"), containing: ["display.level"]) {
            try await self.override("display.level", .int32(11))
        }
        await assertDBusError(PropBusAPI.standard("InvalidArgs"), containing: ["display.level"]) {
            try await self.override("display.level", .string("x"))
        }
        await assertDBusError(PropBusAPI.error("InvalidValue"), containing: ["display.mode"]) {
            try await self.override("display.mode", .string("on"))
        }
        await assertDBusError(PropBusAPI.error("UnknownKey"), containing: ["display.none"]) {
            try await self.override("display.none", .int32(1))
        }
        await assertDBusError(PropBusAPI.standard("InvalidArgs"), containing: ["ttl"]) {
            _ = try await self.client.call(PropBusAPI.manager, "Override", [.string("display.level"), .variant(.int32(1)), .vardict(["ttl": .string("soon")])])
        }
        await assertDBusError(PropBusAPI.error("UnknownKey"), containing: ["12345"]) { try await self.release(12345) }
    }

    func testHistoryRecordsAnOverrideAndItsEndWithTheirOrigins() async throws {
        try await makeIdleDelay()
        let holder = try await Client.connect(to: bus)
        let recorder = try await client.recordChanges(ofGroup: "display")
        let handle = try await override("display.idleDelay", .uint32(0), by: holder)
        holder.close()
        _ = await recorder.wait { _ in self.idleDelaySignals(recorder).contains(.uint32(600)) }
        let history = try await propctl(["history", "display.idleDelay"])
        XCTAssertTrue(history.stdout.contains("Override"), "\(history)")
        XCTAssertTrue(history.stdout.contains("override \(handle) ended"), "\(history)")
    }

    // MARK: Ephemeral keys

    func testAKeyWithConnectionLifetimeVanishesWithItsCreator() async throws {
        let creator = try await Client.connect(to: bus)
        try await creator.create("eph.k", "i", default: .int32(1), options: ["lifetime": .string("connection")])
        try await expectValue("eph.k", .int32(1), from: client)
        let removed = try await client.record(path: PropBusAPI.rootPath, interface: PropBusAPI.objectManager, member: "InterfacesRemoved")
        creator.close()
        let signals = await removed.wait { $0.contains { $0.arguments.first == .objectPath("/org/propbus/PropBus1/eph") } }
        XCTAssertTrue(signals.contains { $0.arguments.first == .objectPath("/org/propbus/PropBus1/eph") }, "\(signals)")
        let listed = try await client.list(prefix: "eph.")
        XCTAssertTrue(listed.isEmpty, "\(listed.map(\.key))")
    }

    func testPropctlCreateWithConnectionLifetimeHoldsTheKeyWhileItsCommandRuns() async throws {
        let inside = "\(BuildProducts.propctl) --address '\(bus.address)' get eph.run"
        let result = try await propctl(["create", "eph.run", "s", "--default", "here", "--lifetime", "connection", "--", "sh", "-c", inside])
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertEqual(result.stdout, "here\n", "\(result)")
        try await client.barrier()
        let listed = try await client.list(prefix: "eph.")
        XCTAssertTrue(listed.isEmpty, "the key went with its creator: \(listed.map(\.key))")
    }

    func testAKeyWithATTLIsDeletedWhenItEndsAlsoAfterARestart() async throws {
        try await client.create("eph.ttl", "i", default: .int32(1), options: ["lifetime": .double(3)])
        let removed = try await client.record(path: PropBusAPI.rootPath, interface: PropBusAPI.objectManager, member: "InterfacesRemoved")
        try await restartDaemon(arguments: daemonArguments)
        let signals = await removed.wait(timeout: 20) { $0.contains { $0.arguments.first == .objectPath("/org/propbus/PropBus1/eph") } }
        XCTAssertTrue(signals.contains { $0.arguments.first == .objectPath("/org/propbus/PropBus1/eph") }, "\(signals)")
    }

    func testABadLifetimeIsRefusedNamingTheKey() async throws {
        await assertDBusError(PropBusAPI.standard("InvalidArgs"), containing: ["eph.bad", "lifetime"]) {
            try await self.client.create("eph.bad", "i", default: .int32(1), options: ["lifetime": .string("forever")])
        }
        await assertDBusError(PropBusAPI.standard("InvalidArgs"), containing: ["eph.fleet", "lifetime", "fleet"]) {
            try await self.client.create("eph.fleet", "i", default: .int32(1), options: ["lifetime": .string("connection"), "scope": .string("fleet")])
        }
        try await client.create("eph.plain", "i", default: .int32(1))
        await assertDBusError(PropBusAPI.error("Exists"), containing: ["eph.plain", "lifetime"]) {
            try await self.client.create("eph.plain", "i", default: .int32(1), options: ["lifetime": .double(60)])
        }
    }

    func testBusctlOverridesAndReleases() async throws {
        try await makeIdleDelay()
        let made = try await busctl(["call", PropBusAPI.busName, PropBusAPI.rootPath, PropBusAPI.manager, "Override", "sva{sv}",
                                     "display.idleDelay", "u", "42", "1", "ttl", "u", "600"])
        XCTAssertTrue(made.succeeded, "\(made)")
        let handle = made.stdout.split(separator: " ").last.map { String($0).trimmingCharacters(in: .whitespacesAndNewlines) } ?? ""
        // busctl's connection is gone: only the TTL holds it.
        try await expectValue("display.idleDelay", .uint32(42), from: client)
        let listed = try await client.list(prefix: "display.idleDelay").first
        guard case .array(_, let holds)? = listed?.metadata["overrides"], let hold = holds.first?.stringKeyedEntries else {
            return XCTFail("no overrides metadata: \(String(describing: listed?.metadata))")
        }
        XCTAssertEqual(hold["handle"]?.unwrappingVariantOnce, .uint64(UInt64(handle) ?? 0))
        XCTAssertNotNil(hold["expires"], "\(hold)")
        let released = try await busctl(["call", PropBusAPI.busName, PropBusAPI.rootPath, PropBusAPI.manager, "ReleaseOverride", "t", handle])
        XCTAssertTrue(released.succeeded, "\(released)")
        try await expectValue("display.idleDelay", .uint32(600), from: client)
    }

    // MARK: GDBus

    func testAGDBusProxySeesAnOverrideAndItsEnd() async throws {
        try await makeIdleDelay()
        let script = #"""
import sys
from gi.repository import Gio, GLib
conn = Gio.DBusConnection.new_for_address_sync(sys.argv[1],
    Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION, None, None)
NAME, ROOT = "org.propbus.PropBus1", "/org/propbus/PropBus1"
proxy = Gio.DBusProxy.new_sync(conn, Gio.DBusProxyFlags.NONE, None, NAME, ROOT + "/display", "org.propbus.PropBus1.Values", None)
manager = Gio.DBusProxy.new_sync(conn, Gio.DBusProxyFlags.NONE, None, NAME, ROOT, "org.propbus.PropBus1.Manager", None)
ctx = GLib.MainContext.default()
def wait_for(value):
    deadline = GLib.get_monotonic_time() + 10000000
    while GLib.get_monotonic_time() < deadline:
        if proxy.get_cached_property("idleDelay").unpack() == value:
            return True
        ctx.iteration(False)
    print("never saw %d, cached %s" % (value, proxy.get_cached_property("idleDelay")))
    return False
handle = manager.call_sync("Override", GLib.Variant("(sva{sv})", ("display.idleDelay", GLib.Variant("u", 0), {})), 0, 5000, None).unpack()[0]
wait_for(0)
manager.call_sync("ReleaseOverride", GLib.Variant("(t)", (handle,)), 0, 5000, None)
wait_for(600)
print("done")
"""#
        let result = try await runCommand("/usr/bin/python3", ["-c", script, bus.address], environment: bus.environment, timeout: 30)
        XCTAssertEqual(result.stdout, "done\n", "\(result)")
    }
}

/// Overrides' rights and quota, as `nobody` on a system-like bus with `--system-access`.
final class AccessControlOverrideTests: AccessControlTestCase, @unchecked Sendable {
    override var daemonArguments: [String] { ["--system-access", "--quota", "overrides=2"] }

    private func expectValue(_ key: String, _ expected: DBusValue, _ message: String = "", from reader: Client,
                             file: StaticString = #filePath, line: UInt = #line) async throws {
        let value = try await reader.get(key)
        XCTAssertEqual(value, expected, message, file: file, line: line)
    }

    private func overrideAsNobody(_ key: String, _ value: String, ttl: Int = 600) async throws -> CommandResult {
        try await gdbusAsNobody(PropBusAPI.rootPath, "org.propbus.PropBus1.Manager.Override", [key, "<\(value)>", "{'ttl': <uint32 \(ttl)>}"])
    }

    func testAnOverrideIsAWriteNobodyMayNotMakeOnAKeyItMayNotWrite() async throws {
        try await client.create("display.idleDelay", "u", default: .uint32(300))
        assertDenied(try await overrideAsNobody("display.idleDelay", "uint32 0"), naming: "display.idleDelay")
        try await expectValue("display.idleDelay", .uint32(300), from: client)
    }

    func testOverridesStopAtTheUIDsQuota() async throws {
        try await client.create("mine.a", "i", default: .int32(0), options: ["writers": .array(of: .string, [.string("nobody")])])
        assertSucceeded(try await overrideAsNobody("mine.a", "1"))
        assertSucceeded(try await overrideAsNobody("mine.a", "2"))
        let refused = try await overrideAsNobody("mine.a", "3")
        XCTAssertFalse(refused.succeeded, "\(refused)")
        XCTAssertTrue(refused.stderr.contains(PropBusAPI.error("LimitsExceeded")) && refused.stderr.contains("uid \(Self.nobody)")
                      && refused.stderr.contains("--quota overrides"), "\(refused)")
        // Root is exempt.
        _ = try await client.call(PropBusAPI.manager, "Override", [.string("mine.a"), .variant(.int32(4)), .vardict([:])])
    }

    func testNobodyCannotReleaseAnOverrideOfAKeyItMayNotWrite() async throws {
        try await client.create("mine.a", "i", default: .int32(0))
        let reply = try await client.call(PropBusAPI.manager, "Override", [.string("mine.a"), .variant(.int32(4)), .vardict(["ttl": .uint32(600)])])
        guard case .uint64(let handle)? = reply.first else { return XCTFail("\(reply)") }
        let refused = try await gdbusAsNobody(PropBusAPI.rootPath, "org.propbus.PropBus1.Manager.ReleaseOverride", ["uint64 \(handle)"])
        XCTAssertTrue(refused.stderr.contains(Self.accessDenied), "\(refused)")
        try await expectValue("mine.a", .int32(4), from: client)
    }
}
