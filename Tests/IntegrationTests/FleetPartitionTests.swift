import DBus
import Etcd
import XCTest

/// A member that stops answering without closing its connections (frozen, or cut off by a
/// partition that drops packets) must not hold a host's watch: its TCP connection stays up and
/// `hasleader` cannot speak for it, so the host has to notice by itself and move on. The
/// cluster runs with etcd's defaults (no fast progress notifications).
final class FleetPartitionTests: FleetTestCase {
    override var ownsEtcd: Bool { true }
    override var etcdSize: Int { 3 }

    /// Restarts A on a follower first and B on the other members; returns the follower.
    private func hostAOnAFollower() async throws -> Int {
        let leader = try XCTUnwrap(try cluster!.leaderIndex(), "no leader")
        let follower = (0..<3).first { $0 != leader }!
        let others = (0..<3).filter { $0 != follower }
        await hostA.stop()
        try await hostA.start(endpoints: [endpoints[follower]] + others.map { endpoints[$0] }, prefix: prefix)
        await hostB.stop()
        try await hostB.start(endpoints: others.map { endpoints[$0] }, prefix: prefix)
        return follower
    }

    func testAHostWhoseMemberHangsMovesItsWatchToALiveOne() async throws {
        let key = "lab.hang.level"
        try await hostA.createFleet(key, "i", default: .int32(0))
        let defined = await hostB.waitFor(key, .int32(0))
        XCTAssertTrue(defined, diagnostics)
        let hung = try await hostAOnAFollower()

        let member = try XCTUnwrap(cluster!.members[hung].process)
        kill(member.processIdentifier, SIGSTOP)
        defer { kill(member.processIdentifier, SIGCONT) }

        try await hostB.client.set(key, .int32(5))
        let seen = await hostA.waitFor(key, .int32(5), timeout: 20)
        let state = (try? await hostA.fleetState()) ?? "?"
        XCTAssertTrue(seen, "A's watch stayed on the hung member (FleetState \(state)): B's write never arrived\n\(diagnostics)")
    }

    func testADeletionWhileAHostsMemberHangsStillReachesIt() async throws {
        try await hostA.createFleet("lab.gone.level", "i", default: .int32(0))
        try await hostA.createFleet("lab.gone.key", "s", default: .string("here"))
        try await hostA.client.set("lab.gone.level", .int32(9))
        let defined = await hostB.waitFor("lab.gone.level", .int32(9))
        XCTAssertTrue(defined, diagnostics)
        let hung = try await hostAOnAFollower()

        let member = try XCTUnwrap(cluster!.members[hung].process)
        kill(member.processIdentifier, SIGSTOP)
        defer { kill(member.processIdentifier, SIGCONT) }

        // Only deletions: a Reset (the stored value goes) and a DeleteProperty.
        try await hostB.client.reset("lab.gone.level")
        try await hostB.client.delete("lab.gone.key")
        let reset = await hostA.waitFor("lab.gone.level", .int32(0), timeout: 20)
        XCTAssertTrue(reset, "B's Reset never reached A while A's member hung\n\(diagnostics)")
        let gone = await eventually(timeout: 10) { (try? await self.hostA.client.get("lab.gone.key")) == nil }
        XCTAssertTrue(gone, "B's deletion never reached A while A's member hung\n\(diagnostics)")
    }
}
