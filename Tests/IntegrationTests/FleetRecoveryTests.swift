import DBus
import Etcd
import XCTest

/// A host that was down catches up; status shows the fleet.
final class FleetRecoveryTests: FleetTestCase {
    func testHostDownWhileOthersWriteCatchesUpAfterRestart() async throws {
        try await hostA.createFleet("lab.sign.text", "s", default: .string("hello"))
        try await hostA.createFleet("lab.sign.color", "s", default: .string("white"))
        let defined = await hostB.waitFor("lab.sign.color", .string("white"))
        XCTAssertTrue(defined, diagnostics)

        await hostB.stop()
        try await hostA.client.set("lab.sign.text", .string("closed"))
        try await hostA.client.delete("lab.sign.color")
        try await hostA.createFleet("lab.sign.font", "s", default: .string("sans"))
        try await hostA.client.set("lab.sign.font", .string("serif"))
        try await hostB.start()

        let text = await hostB.waitFor("lab.sign.text", .string("closed"))
        XCTAssertTrue(text, "B did not replay the Set it missed\n\(diagnostics)")
        let font = await hostB.waitFor("lab.sign.font", .string("serif"))
        XCTAssertTrue(font, "B did not replay the definition and Set it missed\n\(diagnostics)")
        let gone = await eventually(timeout: 10) { (try? await self.hostB.client.get("lab.sign.color")) == nil }
        XCTAssertTrue(gone, "B still has the key deleted while it was down")

        // And B follows live changes again.
        let changes = try await hostB.client.recordChanges(ofGroup: "lab.sign")
        try await hostA.client.set("lab.sign.text", .string("open"))
        let live = await changes.wait { $0.contains { $0.changed["text"] == .string("open") } }
        XCTAssertTrue(live.contains { $0.changed["text"] == .string("open") }, "\(live)\n\(diagnostics)")
    }

    func testStatusShowsTheFleetStateAndTheHostsThatAreUp() async throws {
        let stateA = try await hostA.fleetState()
        XCTAssertEqual(stateA, "connected")
        let stateB = try await hostB.fleetState()
        XCTAssertEqual(stateB, "connected")
        let revision = try await hostA.managerProperty("FleetRevision")
        XCTAssertEqual(revision.type, .uint64, "FleetRevision is \(revision)")
        let number = try XCTUnwrap(Fleet.integer(revision))
        XCTAssertGreaterThan(number, 0)

        let status = try await hostA.propctl(["status"])
        XCTAssertTrue(status.succeeded, "\(status)")
        // Other hosts' presence keys may move the revision meanwhile: it is read again after.
        let later = try await hostA.managerProperty("FleetRevision")
        let latest = try XCTUnwrap(Fleet.integer(later))
        let shown = status.stdout.split(separator: "\n").first { $0.hasPrefix("fleet\tconnected, etcd revision ") }
            .flatMap { Int64($0.split(separator: " ").last ?? "") }
        XCTAssertTrue(shown.map { (number...latest).contains($0) } ?? false,
                      "propctl status does not show the fleet at a revision between \(number) and \(latest):\n\(status.stdout)")

        let hosts = try await hostA.propctl(["status", "--fleet"])
        XCTAssertTrue(hosts.succeeded, "\(hosts)")
        XCTAssertTrue(hosts.stdout.contains(hostA.name) && hosts.stdout.contains(hostB.name),
                      "propctl status --fleet does not list both hosts:\n\(hosts.stdout)\n\(diagnostics)")

        // A host that stops leaves the list (its lease is revoked at shutdown).
        await hostB.stop()
        var listed = ""
        let left = await eventually(timeout: 10) {
            listed = (try? await self.hostA.propctl(["status", "--fleet"]).stdout) ?? ""
            return listed.contains(self.hostA.name) && !listed.contains(self.hostB.name)
        }
        XCTAssertTrue(left, "B still listed after it stopped:\n\(listed)")
    }

    func testFleetStateChangesAreSignalled() async throws {
        await hostA.stop()
        // From any sender: the daemon may connect to etcd before it owns its name.
        let states = try await hostA.recordFromAnySender(path: PropBusAPI.rootPath, interface: PropBusAPI.properties,
                                                         member: "PropertiesChanged")
        try await hostA.start(connected: false)
        let connected = await states.wait(timeout: 15) { $0.contains { $0.changed["FleetState"] == .string("connected") } }
        XCTAssertTrue(connected.contains { $0.changed["FleetState"] == .string("connected") },
                      "no PropertiesChanged(FleetState = connected) after a start: \(connected)\n\(diagnostics)")
    }

    /// A transient fleet key's value lives in each daemon's memory only, yet it is the fleet's:
    /// a host that restarts must show etcd's value again, not the default (its watch resumes
    /// after the revision that brought the value, which therefore never comes again).
    func testARestartedHostShowsATransientFleetKeysValueAgain() async throws {
        try await hostA.createFleet("lab.mode.banner", "s", default: .string(""), options: ["persistent": .boolean(false)])
        try await hostA.client.set("lab.mode.banner", .string("maintenance"))
        let arrived = await hostB.waitFor("lab.mode.banner", .string("maintenance"))
        XCTAssertTrue(arrived, diagnostics)

        await hostB.stop()
        try await hostB.start()
        let shown = await hostB.waitFor("lab.mode.banner", .string("maintenance"))
        let value = try await hostB.client.get("lab.mode.banner")
        XCTAssertTrue(shown, "after a restart B shows \(value) while the fleet holds \"maintenance\"\n\(diagnostics)")
    }
}
