import DBus
import Etcd
import XCTest

/// etcd goes away, comes back, forgets history: hosts keep serving their mirror, refuse fleet
/// writes fast, and resync. Each test has an etcd of its own, since it stops or compacts it.
///
final class FleetOutageTests: FleetTestCase {
    override var ownsEtcd: Bool { true }

    /// `127.0.0.1:PORT` of the first member, as an error message names it.
    private var firstEndpoint: String { endpoints[0].replacingOccurrences(of: "http://", with: "") }

    func testWithEtcdStoppedFleetWritesFailFastWhileReadsAndLocalKeysServe() async throws {
        let key = "lab.alarm.armed"
        try await hostA.createFleet(key, "b", default: .boolean(false))
        try await hostA.client.set(key, .boolean(true))
        let arrived = await hostB.waitFor(key, .boolean(true))
        XCTAssertTrue(arrived, diagnostics)
        try await hostA.client.create("lab.local.counter", "i", default: .int32(0))
        let manager = try await hostA.recordManagerChanges()

        cluster!.kill(0)

        let started = Date()
        await assertDBusError(PropBusAPI.error("Unavailable"), containing: [key, firstEndpoint]) {
            try await self.hostA.client.set(key, .boolean(false))
        }
        // The issue's bound for a fleet write while etcd is unreachable (3 s, plus D-Bus slack).
        XCTAssertLessThan(Date().timeIntervalSince(started), 3.5, "a fleet write took this long to fail")

        let mirrorA = try await hostA.client.get(key)
        let mirrorB = try await hostB.client.get(key)
        XCTAssertEqual(mirrorA, .boolean(true), "A's mirror")
        XCTAssertEqual(mirrorB, .boolean(true), "B's mirror")
        try await hostA.client.set("lab.local.counter", .int32(5))
        let counter = try await hostA.client.get("lab.local.counter")
        XCTAssertEqual(counter, .int32(5))

        let down = await manager.wait(timeout: 15) { $0.contains { $0.changed["FleetState"] == .string("unavailable") } }
        XCTAssertTrue(down.contains { $0.changed["FleetState"] == .string("unavailable") },
                      "no PropertiesChanged(FleetState = unavailable): \(down)\n\(diagnostics)")
        let state = try await hostA.fleetState()
        XCTAssertEqual(state, "unavailable")
        let status = try await hostA.propctl(["status"])
        XCTAssertTrue(status.stdout.contains("unavailable"), "propctl status:\n\(status.stdout)")

        try cluster!.launch(0)
        try cluster!.waitUntilServing()
        let up = await manager.wait(timeout: 20) { signals in
            signals.drop { $0.changed["FleetState"] != .string("unavailable") }.contains { $0.changed["FleetState"] == .string("connected") }
        }
        XCTAssertTrue(up.contains { $0.changed["FleetState"] == .string("connected") },
                      "no PropertiesChanged(FleetState = connected) after etcd came back: \(up)\n\(diagnostics)")
        try await hostA.client.set(key, .boolean(false))
        let resumed = await hostB.waitFor(key, .boolean(false))
        XCTAssertTrue(resumed, diagnostics)
    }

    func testWithEtcdHungEveryWaitingFleetWriteFailsWithinTheBound() async throws {
        try await hostA.createFleet("lab.hung.first", "i", default: .int32(0))
        try await hostA.createFleet("lab.hung.second", "i", default: .int32(0))
        let other = try await Client.connect(to: hostA.bus)
        defer { other.close() }
        let member = try XCTUnwrap(cluster!.members[0].process)
        // Stopped, not dead: connections are accepted and never answered.
        kill(member.processIdentifier, SIGSTOP)
        defer { kill(member.processIdentifier, SIGCONT) }

        let started = Date()
        let first = hostA.client
        async let one: DBusError? = { () async -> DBusError? in
            do { try await first.set("lab.hung.first", .int32(1)); return nil } catch { return error as? DBusError }
        }()
        async let two: DBusError? = { () async -> DBusError? in
            do { try await other.set("lab.hung.second", .int32(2)); return nil } catch { return error as? DBusError }
        }()
        let (errorOne, errorTwo) = await (one, two)
        let elapsed = Date().timeIntervalSince(started)
        XCTAssertEqual(errorOne?.name, PropBusAPI.error("Unavailable"), "\(String(describing: errorOne))")
        XCTAssertEqual(errorTwo?.name, PropBusAPI.error("Unavailable"), "\(String(describing: errorTwo))")
        // The issue's bound holds for each write, not only the first in line.
        XCTAssertLessThan(elapsed, 3.5, "two fleet writes to a hung etcd took this long to fail")
        let mirror = try await hostA.client.get("lab.hung.first")
        XCTAssertEqual(mirror, .int32(0))
    }

    func testDaemonStartedWhileEtcdIsDownServesItsMirror() async throws {
        let key = "lab.boot.mode"
        try await hostA.createFleet(key, "s", default: .string("normal"))
        try await hostA.client.set(key, .string("kiosk"))
        let arrived = await hostB.waitFor(key, .string("kiosk"))
        XCTAssertTrue(arrived, diagnostics)

        await hostA.stop()
        cluster!.kill(0)
        try await hostA.start(connected: false)

        let mirror = try await hostA.client.get(key)
        XCTAssertEqual(mirror, .string("kiosk"), "a host booting offline does not serve its mirror")
        let state = try await hostA.fleetState()
        XCTAssertTrue(["connecting", "unavailable"].contains(state), "FleetState \(state) with etcd down")
        await assertDBusError(PropBusAPI.error("Unavailable"), containing: [key]) {
            try await self.hostA.client.set(key, .string("normal"))
        }

        try cluster!.launch(0)
        try cluster!.waitUntilServing()
        let connected = await hostA.waitForFleetState("connected", timeout: 20)
        XCTAssertTrue(connected, diagnostics)
        try await hostA.client.set(key, .string("normal"))
        let resumed = await hostB.waitFor(key, .string("normal"))
        XCTAssertTrue(resumed, diagnostics)
    }

    func testCompactionPastAStoppedHostsCursorForcesAFullResync() async throws {
        try await hostA.createFleet("lab.menu.title", "s", default: .string("Menu"))
        try await hostA.createFleet("lab.menu.footer", "s", default: .string("bye"))
        try await hostA.createFleet("lab.menu.banner", "s", default: .string("none"))
        try await hostA.client.set("lab.menu.banner", .string("sale"))
        let arrived = await hostB.waitFor("lab.menu.banner", .string("sale"))
        XCTAssertTrue(arrived, diagnostics)

        await hostB.stop()
        try await hostA.client.set("lab.menu.title", .string("Specials"))
        try await hostA.client.reset("lab.menu.banner")
        try await hostA.client.delete("lab.menu.footer")
        let now = try etcd.range(key: Array("any".utf8)).header.revision
        try etcd.compact(revision: now)

        // Subscribed before B starts, from any sender: a resync B runs before it owns its
        // name is heard too.
        let changes = try await hostB.recordFromAnySender(path: PropBusAPI.rootPath + "/lab/menu",
                                                          interface: PropBusAPI.properties, member: "PropertiesChanged")
        try await hostB.start()

        let title = await hostB.waitFor("lab.menu.title", .string("Specials"))
        XCTAssertTrue(title, "B did not resync the changed key\n\(diagnostics)")
        let banner = await hostB.waitFor("lab.menu.banner", .string("none"))
        XCTAssertTrue(banner, "B did not resync the reset key\n\(diagnostics)")
        let footerGone = await eventually(timeout: 10) { (try? await self.hostB.client.get("lab.menu.footer")) == nil }
        XCTAssertTrue(footerGone, "B still has the key deleted while it was down\n\(diagnostics)")

        let signals = await changes.wait(timeout: 10) { signals in
            signals.contains { $0.changed["title"] == .string("Specials") }
                && signals.contains { $0.changed["banner"] == .string("none") }
                && signals.contains { $0.invalidated.contains("footer") }
        }
        XCTAssertTrue(signals.contains { $0.changed["title"] == .string("Specials") }, "changed key not signalled: \(signals)")
        XCTAssertTrue(signals.contains { $0.changed["banner"] == .string("none") }, "reset key not signalled: \(signals)")
        XCTAssertTrue(signals.contains { $0.invalidated.contains("footer") }, "deleted key not signalled: \(signals)")
    }

    /// A fleet key a model file declares at a reload while etcd is down is offered to the
    /// fleet once etcd is back: until then it is this host's alone, and its writes, accepted by
    /// etcd, would reach no other host (they have no definition for it).
    func testAFleetKeyAReloadDeclaresWhileEtcdIsDownIsOfferedWhenEtcdIsBack() async throws {
        let file = hostB.bus.directory.appendingPathComponent("late.json")
        try #"{"groups": {"lab.lateside": {"properties": {"note": {"type": "s", "default": "b"}}}}}"#.write(to: file, atomically: true, encoding: .utf8)
        await hostB.stop()
        try await hostB.start(extraArguments: ["--model", file.path])

        cluster!.kill(0)
        let down = await hostB.waitForFleetState("unavailable")
        XCTAssertTrue(down, diagnostics)
        try #"{"groups": {"lab.late": {"properties": {"level": {"type": "i", "default": 1, "scope": "fleet"}}}}}"#.write(to: file, atomically: true, encoding: .utf8)
        let reload = try await hostB.propctl(["reload"])
        XCTAssertTrue(reload.succeeded, "\(reload)")

        try cluster!.launch(0)
        try cluster!.waitUntilServing()
        let up = await hostB.waitForFleetState("connected", timeout: 20)
        XCTAssertTrue(up, diagnostics)
        let offered = await hostA.waitFor("lab.late.level", .int32(1))
        XCTAssertTrue(offered, "the key B's file declared while etcd was down never reached the fleet\n\(diagnostics)")
        try await hostB.client.set("lab.late.level", .int32(5))
        let arrived = await hostA.waitFor("lab.late.level", .int32(5))
        XCTAssertTrue(arrived, "B's write of its fleet key never reached A\n\(diagnostics)")
    }
}
