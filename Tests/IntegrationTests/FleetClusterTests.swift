import DBus
import Etcd
import EtcdTestSupport
import XCTest

/// A 3-member etcd losing members: the fleet goes on while a quorum remains, refuses fleet
/// writes without one, and recovers when it returns.
final class FleetClusterTests: FleetTestCase {
    override var ownsEtcd: Bool { true }
    override var etcdSize: Int { 3 }

    /// Sets `key` on `host` to successive values until one is accepted (within `timeout`);
    /// `Unavailable` is expected while the cluster elects a leader, any other error fails.
    /// Returns the accepted value.
    private func setUntilAccepted(_ host: FleetHost, _ key: String, from start: Int32,
                                  timeout: TimeInterval = 15) async -> Int32? {
        var value = start
        var accepted: Int32?
        var unexpected: [String] = []
        _ = await eventually(timeout: timeout) {
            value += 1
            do {
                try await host.client.set(key, .int32(value))
                accepted = value
                return true
            } catch let error as DBusError where error.name == PropBusAPI.error("Unavailable") {
                return false
            } catch {
                unexpected.append("\(error)")
                return false
            }
        }
        XCTAssertEqual(unexpected, [], "fleet writes failed with other errors than Unavailable")
        return accepted
    }

    func testKillingTheLeaderKeepsTheFleetWorking() async throws {
        let key = "lab.vote.count"
        try await hostA.createFleet(key, "i", default: .int32(0))
        let defined = await hostB.waitFor(key, .int32(0))
        XCTAssertTrue(defined, diagnostics)

        let leader = try XCTUnwrap(try cluster!.leaderIndex(), "no leader")
        cluster!.kill(leader)

        let fromAAccepted = await setUntilAccepted(hostA, key, from: 0)
        let fromA = try XCTUnwrap(fromAAccepted, "no fleet write went through after the leader died\n\(diagnostics)")
        let onB = await hostB.waitFor(key, .int32(fromA))
        XCTAssertTrue(onB, "B never saw A's write after the leader died\n\(diagnostics)")
        let fromBAccepted = await setUntilAccepted(hostB, key, from: 100)
        let fromB = try XCTUnwrap(fromBAccepted, diagnostics)
        let onA = await hostA.waitFor(key, .int32(fromB))
        XCTAssertTrue(onA, "A never saw B's write after the leader died\n\(diagnostics)")
    }

    func testKillingTheMemberADaemonUsesMovesItToAnother() async throws {
        let key = "lab.queue.length"
        try await hostA.createFleet(key, "i", default: .int32(0))
        let defined = await hostB.waitFor(key, .int32(0))
        XCTAssertTrue(defined, diagnostics)

        // A talks to a follower first (a leader's death is the other test); B to the others.
        let leader = try XCTUnwrap(try cluster!.leaderIndex(), "no leader")
        let used = (0..<3).first { $0 != leader }!
        let others = (0..<3).filter { $0 != used }
        await hostA.stop()
        try await hostA.start(endpoints: [endpoints[used]] + others.map { endpoints[$0] }, prefix: prefix)
        let connected = await hostA.waitForFleetState("connected")
        XCTAssertTrue(connected, diagnostics)
        await hostB.stop()
        try await hostB.start(endpoints: others.map { endpoints[$0] }, prefix: prefix)

        cluster!.kill(used)

        // A's watch moves on: B's writes keep arriving.
        let changes = try await hostA.client.recordChanges(ofGroup: "lab.queue")
        let fromBAccepted = await setUntilAccepted(hostB, key, from: 0)
        let fromB = try XCTUnwrap(fromBAccepted, diagnostics)
        let seen = await changes.wait(timeout: 15) { $0.contains { $0.changed["length"] == .int32(fromB) } }
        XCTAssertTrue(seen.contains { $0.changed["length"] == .int32(fromB) },
                      "A's watch did not move off the dead member\n\(diagnostics)")
        // And A's writes go to a live member.
        let fromAAccepted = await setUntilAccepted(hostA, key, from: 100)
        let fromA = try XCTUnwrap(fromAAccepted, diagnostics)
        let onB = await hostB.waitFor(key, .int32(fromA))
        XCTAssertTrue(onB, diagnostics)
        let state = try await hostA.fleetState()
        XCTAssertEqual(state, "connected")
    }

    func testLosingQuorumMakesFleetWritesUnavailableUntilItReturns() async throws {
        let key = "lab.power.mode"
        try await hostA.createFleet(key, "i", default: .int32(0))
        try await hostA.client.set(key, .int32(1))
        let arrived = await hostB.waitFor(key, .int32(1))
        XCTAssertTrue(arrived, diagnostics)
        try await hostA.client.create("lab.local.log", "i", default: .int32(0))
        let manager = try await hostA.recordManagerChanges()

        cluster!.kill(1)
        cluster!.kill(2)

        // The member left has no leader: its watch ends (hasleader) and the state says so.
        let down = await manager.wait(timeout: 20) { $0.contains { $0.changed["FleetState"] == .string("unavailable") } }
        XCTAssertTrue(down.contains { $0.changed["FleetState"] == .string("unavailable") },
                      "FleetState did not become unavailable without a quorum: \(down)\n\(diagnostics)")
        await assertDBusError(PropBusAPI.error("Unavailable"), containing: [key]) {
            try await self.hostA.client.set(key, .int32(2))
        }
        let mirror = try await hostA.client.get(key)
        XCTAssertEqual(mirror, .int32(1), "a refused write changed the mirror, or reads stopped")
        try await hostA.client.set("lab.local.log", .int32(7))

        // Quorum back: two of three.
        try cluster!.launch(1)
        try cluster!.waitUntilServing()
        let recovered = await setUntilAccepted(hostA, key, from: 10, timeout: 20)
        let accepted = try XCTUnwrap(recovered, "fleet writes did not recover with the quorum\n\(diagnostics)")
        let onB = await hostB.waitFor(key, .int32(accepted))
        XCTAssertTrue(onB, diagnostics)
        let connected = await hostA.waitForFleetState("connected")
        XCTAssertTrue(connected, diagnostics)
    }

    /// Without a quorum, `status --fleet` still prints the status with the
    /// fleet row, says the host list cannot be read now, in one short error line, at once.
    func testStatusFleetWithoutAQuorumPrintsTheStatusAndSaysTheHostListCannotBeReadNow() async throws {
        cluster!.kill(1)
        cluster!.kill(2)

        // Not waiting for FleetState: the command copes with whatever the daemon knows now.
        // 1.5 s bounds the wait, it is not a measurement.
        let status = try await hostA.propctl(["status", "--fleet"], timeout: 1.5)
        XCTAssertFalse(status.timedOut, "propctl status --fleet did not answer within 1.5 s without a quorum")
        XCTAssertTrue(status.stdout.contains("running"), "no status rows:\n\(status)")
        XCTAssertTrue(status.stdout.contains("etcd revision"), "no fleet row:\n\(status)")
        XCTAssertTrue((status.stdout + status.stderr).contains("cannot be read now"), "\(status)")
        let errorLines = status.stderr.split(separator: "\n")
        XCTAssertLessThanOrEqual(errorLines.count, 1, "\(status)")
        XCTAssertLessThan(status.stderr.utf8.count, 240, "\(status)")
    }

    /// Whether a connection accepted on `port` holds bytes its process has not read (a request
    /// a frozen member took), as `ss` shows them.
    private static func requestWaiting(onPort port: Int) -> Bool {
        guard let output = try? EtcdCluster.run("/usr/bin/ss", ["-tnH", "state", "established", "sport", "=", ":\(port)"]) else { return false }
        return output.split(separator: "\n").contains { line in
            (line.split(separator: " ").first.flatMap { Int($0) } ?? 0) > 0
        }
    }

    /// A write whose connection went away (the member it was sent to died
    /// with it) is sent again at once to another member, within the bound, instead of failing.
    func testAWriteWhoseMemberDiesUnderItIsSentAgainToAnotherMember() async throws {
        let key = "lab.leader.mode"
        try await hostA.createFleet(key, "i", default: .int32(0))
        // A's client talks to its first endpoint, a follower (a frozen leader would hold a
        // write sent to any member). Frozen, the member takes the write's request and keeps it.
        let leader = try XCTUnwrap(try cluster!.leaderIndex(), "no leader")
        let follower = (0..<3).first { $0 != leader }!
        await hostA.stop()
        try await hostA.start(endpoints: [endpoints[follower]] + (0..<3).filter { $0 != follower }.map { endpoints[$0] }, prefix: prefix)
        let member = try XCTUnwrap(cluster!.members[follower].process)
        kill(member.processIdentifier, SIGSTOP)
        let port = try XCTUnwrap(URL(string: endpoints[follower])?.port)
        let client = hostA.client
        async let write: DBusError? = { () async -> DBusError? in
            do { try await client.set(key, .int32(1)); return nil } catch { return error as? DBusError }
        }()
        let taken = await eventually(timeout: 5) { Self.requestWaiting(onPort: port) }
        XCTAssertTrue(taken, "no request reached the frozen member")
        // It dies, and its connections with it.
        cluster!.kill(follower)

        let error = await write
        XCTAssertNil(error, "a write whose member died under it failed: \(String(describing: error))\n\(diagnostics)")
        let onB = await hostB.waitFor(key, .int32(1))
        XCTAssertTrue(onB, diagnostics)
    }

    func testAHostCutOffFromTheQuorumReplaysWhatItMissedWhenItReturns() async throws {
        try await hostA.createFleet("lab.cut.level", "i", default: .int32(0))
        try await hostA.createFleet("lab.cut.old", "s", default: .string("here"))
        let defined = await hostB.waitFor("lab.cut.old", .string("here"))
        XCTAssertTrue(defined, diagnostics)

        // A reaches one member only; B the other two, which keep the quorum.
        await hostA.stop()
        try await hostA.start(endpoints: [endpoints[0]], prefix: prefix)
        await hostB.stop()
        try await hostB.start(endpoints: [endpoints[1], endpoints[2]], prefix: prefix)
        let manager = try await hostA.recordManagerChanges()
        cluster!.kill(0)
        let cut = await manager.wait(timeout: 20) { $0.contains { $0.changed["FleetState"] == .string("unavailable") } }
        XCTAssertTrue(cut.contains { $0.changed["FleetState"] == .string("unavailable") }, "\(cut)\n\(diagnostics)")

        let accepted = await setUntilAccepted(hostB, "lab.cut.level", from: 0)
        let level = try XCTUnwrap(accepted, diagnostics)
        try await hostB.createFleet("lab.cut.new", "s", default: .string("added"))
        try await hostB.client.delete("lab.cut.old")
        let stale = try await hostA.client.get("lab.cut.level")
        XCTAssertEqual(stale, .int32(0), "A cannot have heard of B's write yet")

        let changes = try await hostA.client.recordChanges(ofGroup: "lab.cut")
        try cluster!.launch(0)
        try cluster!.waitUntilServing()
        let caughtUp = await hostA.waitFor("lab.cut.level", .int32(level), timeout: 20)
        XCTAssertTrue(caughtUp, "A did not replay B's write after its member came back\n\(diagnostics)")
        let added = await hostA.waitFor("lab.cut.new", .string("added"))
        XCTAssertTrue(added, diagnostics)
        let gone = await eventually(timeout: 10) { (try? await self.hostA.client.get("lab.cut.old")) == nil }
        XCTAssertTrue(gone, "A still has the key B deleted")
        let signalled = await changes.wait { $0.contains { $0.changed["level"] == .int32(level) } }
        XCTAssertTrue(signalled.contains { $0.changed["level"] == .int32(level) }, "the replayed write was not signalled on A: \(signalled)")
        let connected = await hostA.waitForFleetState("connected")
        XCTAssertTrue(connected, diagnostics)
    }
}
