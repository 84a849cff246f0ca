import DBus
import Etcd
import XCTest

/// A member that stops answering without closing its connections (frozen, or cut off by a
/// partition that drops packets) must not hold a host's watch: its TCP connection stays up and
/// `hasleader` cannot speak for it, so the host has to notice by itself and move on. The
/// cluster runs with etcd's defaults (no fast progress notifications). (Issue 14.)
final class FleetPartitionTests: FleetTestCase {
    override var ownsEtcd: Bool { true }
    override var etcdSize: Int { 3 }

    func testAHostWhoseMemberHangsMovesItsWatchToALiveOne() async throws {
        let key = "lab.hang.level"
        try await hostA.createFleet(key, "i", default: .int32(0))
        let defined = await hostB.waitFor(key, .int32(0))
        XCTAssertTrue(defined, diagnostics)

        // A talks to a follower first; B to the other two members.
        let leader = try XCTUnwrap(try cluster!.leaderIndex(), "no leader")
        let hung = (0..<3).first { $0 != leader }!
        let others = (0..<3).filter { $0 != hung }
        await hostA.stop()
        try await hostA.start(endpoints: [endpoints[hung]] + others.map { endpoints[$0] }, prefix: prefix)
        await hostB.stop()
        try await hostB.start(endpoints: others.map { endpoints[$0] }, prefix: prefix)

        let member = try XCTUnwrap(cluster!.members[hung].process)
        kill(member.processIdentifier, SIGSTOP)
        defer { kill(member.processIdentifier, SIGCONT) }

        try await hostB.client.set(key, .int32(5))
        let seen = await hostA.waitFor(key, .int32(5), timeout: 20)
        let state = (try? await hostA.fleetState()) ?? "?"
        XCTAssertTrue(seen, "A's watch stayed on the hung member (FleetState \(state)): B's write never arrived\n\(diagnostics)")
    }
}
