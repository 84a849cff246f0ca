import DBus
import Foundation
import XCTest

/// Ephemeral fleet keys: CreateProperty's `lifetime` on a fleet key is an etcd
/// lease. A connection lifetime ends when its creator leaves A's bus (A revokes the lease) or
/// when A stops keeping the lease alive (killed: etcd expires it); a TTL ends in etcd, on time,
/// whether its creating host runs or not. Every host sees the key come and go.
final class FleetLeaseTests: FleetTestCase {
    private func groupPath(_ group: String) -> DBusValue { .objectPath("/org/propbus/PropBus1/\(group)") }

    /// Records InterfacesRemoved on `host`'s root object.
    private func recordRemovals(on host: FleetHost) async throws -> SignalRecorder {
        try await host.client.record(path: PropBusAPI.rootPath, interface: PropBusAPI.objectManager, member: "InterfacesRemoved")
    }

    private func waitForRemoval(of group: String, _ recorder: SignalRecorder, timeout: TimeInterval) async -> Bool {
        let path = groupPath(group)
        let signals = await recorder.wait(timeout: timeout) { $0.contains { $0.arguments.first == path } }
        return signals.contains { $0.arguments.first == path }
    }

    private func listed(_ key: String, on host: FleetHost) async throws -> Client.Listed? {
        try await host.client.list(prefix: key).first { $0.key == key }
    }

    /// Whether every one of `keys` reaches B (its ListProperties lists them).
    private func reachB(_ keys: String...) async -> Bool {
        await eventually(timeout: 15) {
            for key in keys where (try? await self.listed(key, on: self.hostB)) == nil { return false }
            return true
        }
    }

    private let connectionLifetime: [String: DBusValue] = ["scope": .string("fleet"), "lifetime": .string("connection")]

    func testAConnectionLifetimeKeyShowsOnBAndGoesFromBothWhenItsCreatorIsKilled() async throws {
        let holder = try ChildProcess(BuildProducts.propctl, ["--address", hostA.bus.address, "create", "eph.k", "i", "--default", "7",
                                                              "--scope", "fleet", "--lifetime", "connection"],
                                      environment: hostA.bus.environment)
        addTeardownBlock { kill(-holder.pid, SIGKILL) }
        let appeared = await reachB("eph.k")
        XCTAssertTrue(appeared, "the ephemeral fleet key never reached B: \(holder.stderr)\n\(diagnostics)")
        for host in [hostA!, hostB!] {
            let described = try await host.propctl(["describe", "eph.k"])
            XCTAssertTrue(described.stdout.contains("ephemeral (connection)") && described.stdout.contains(hostA.name),
                          "\(host.name) does not show the lifetime and its creating host: \(described)")
        }
        // A Set from B keeps the value on the lease: it goes with the key, from etcd too.
        try await hostB.client.set("eph.k", .int32(8))
        guard await hostA.waitFor("eph.k", .int32(8)) else { return XCTFail("B's Set never reached A\n\(diagnostics)") }
        let removedA = try await recordRemovals(on: hostA), removedB = try await recordRemovals(on: hostB)
        holder.signal(SIGKILL)
        let goneA = await waitForRemoval(of: "eph", removedA, timeout: 15)
        let goneB = await waitForRemoval(of: "eph", removedB, timeout: 15)
        XCTAssertTrue(goneA && goneB, "A: \(goneA), B: \(goneB)\n\(diagnostics)")
        for host in [hostA!, hostB!] {
            let gone = try await listed("eph.k", on: host)
            XCTAssertNil(gone, "\(host.name) still has eph.k")
            let history = try await host.propctl(["history", "eph.k"])
            XCTAssertTrue(history.stdout.contains("ended"), "\(host.name): no lifetime ending in history: \(history)")
        }
        let left = try Fleet.allEntries(etcd, prefix: prefix).filter { String(decoding: $0.key, as: UTF8.self).contains("eph.k") }
        XCTAssertTrue(left.isEmpty, "etcd still holds \(left.map { String(decoding: $0.key, as: UTF8.self) })")
    }

    func testAKilledCreatingHostsConnectionKeyGoesFromBWhenItsLeaseExpires() async throws {
        let creator = try await Client.connect(to: hostA.bus)
        defer { creator.close() }
        try await creator.create("eph.crash", "s", default: .string("x"), options: connectionLifetime)
        let appeared = await reachB("eph.crash")
        XCTAssertTrue(appeared, "\(diagnostics)")
        let removedB = try await recordRemovals(on: hostB)
        await hostA.kill()
        // Nobody revokes it: B drops the key once etcd expires the lease A no longer keeps alive
        // (a few seconds; generous on a loaded machine).
        let gone = await waitForRemoval(of: "eph", removedB, timeout: 40)
        XCTAssertTrue(gone, "B still has the key of the killed host A\n\(diagnostics)")
        // A's creator is gone for good: A started again does not have it either.
        try await hostA.start()
        try await Fleet.barrier(from: hostB, to: hostA)
        let onA = try await listed("eph.crash", on: hostA)
        XCTAssertNil(onA, "\(diagnostics)")
    }

    func testACleanStopEndsItsConnectionKeysAtOnceWhileATTLKeySurvivesTheRestart() async throws {
        let creator = try await Client.connect(to: hostA.bus)
        defer { creator.close() }
        try await creator.create("eph.conn", "i", default: .int32(1), options: connectionLifetime)
        try await creator.create("ttl.long", "i", default: .int32(2), options: ["scope": .string("fleet"), "lifetime": .double(120)])
        let appeared = await reachB("eph.conn", "ttl.long")
        XCTAssertTrue(appeared, "\(diagnostics)")
        let removedB = try await recordRemovals(on: hostB)
        await hostA.stop()
        let gone = await waitForRemoval(of: "eph", removedB, timeout: 15)
        XCTAssertTrue(gone, "a cleanly stopped host's connection key stays on B\n\(diagnostics)")
        try await hostA.start()
        try await Fleet.barrier(from: hostB, to: hostA)
        let conn = try await listed("eph.conn", on: hostA)
        XCTAssertNil(conn)
        for host in [hostA!, hostB!] {
            let ttl = try await listed("ttl.long", on: host)
            XCTAssertNotNil(ttl?.metadata["lifetime"]?.stringKeyedEntries?["expires"], "\(host.name): \(String(describing: ttl?.metadata))\n\(diagnostics)")
        }
    }

    func testATTLKeyEndsOnTimeOnBothHostsAlsoWithItsCreatingHostDown() async throws {
        let removedB = try await recordRemovals(on: hostB)
        let created = try await hostA.propctl(["create", "ttl.short", "i", "--default", "3", "--scope", "fleet", "--lifetime", "3"])
        XCTAssertEqual(created.status, 0, "\(created)")
        let appeared = await reachB("ttl.short")
        XCTAssertTrue(appeared, "\(diagnostics)")
        await hostA.stop()
        let gone = await waitForRemoval(of: "ttl", removedB, timeout: 30)
        XCTAssertTrue(gone, "the 3 s key is still on B\n\(diagnostics)")
        let history = try await hostB.propctl(["history", "ttl.short"])
        XCTAssertTrue(history.stdout.contains("ttl ran out"), "\(history)")
        try await hostA.start()
        try await Fleet.barrier(from: hostB, to: hostA)
        let onA = try await listed("ttl.short", on: hostA)
        XCTAssertNil(onA, "\(diagnostics)")
    }

    func testATTLKeyEndsOnBothRunningHostsWithTheirHistory() async throws {
        let removedA = try await recordRemovals(on: hostA), removedB = try await recordRemovals(on: hostB)
        // Through busctl, as any D-Bus client makes one.
        let created = try await hostA.busctl(["call", PropBusAPI.busName, PropBusAPI.rootPath, PropBusAPI.manager, "CreateProperty",
                                              "ssva{sv}", "ttl.both", "s", "s", "x", "2", "scope", "s", "fleet", "lifetime", "d", "3"])
        XCTAssertEqual(created.status, 0, "\(created)")
        let listed = try await listed("ttl.both", on: hostA)
        XCTAssertNotNil(listed?.metadata["lifetime"]?.stringKeyedEntries?["expires"], "\(String(describing: listed?.metadata))")
        let goneA = await waitForRemoval(of: "ttl", removedA, timeout: 30)
        let goneB = await waitForRemoval(of: "ttl", removedB, timeout: 30)
        XCTAssertTrue(goneA && goneB, "A: \(goneA), B: \(goneB)\n\(diagnostics)")
        for host in [hostA!, hostB!] {
            let history = try await host.propctl(["history", "ttl.both"])
            XCTAssertTrue(history.stdout.contains("lifetime") && history.stdout.contains("ttl ran out"), "\(host.name): \(history)")
        }
    }

    func testDeletingAnEphemeralFleetKeyEndsItsLeaseToo() async throws {
        let creator = try await Client.connect(to: hostA.bus)
        defer { creator.close() }
        try await creator.create("eph.del", "i", default: .int32(1), options: connectionLifetime)
        let appeared = await reachB("eph.del")
        XCTAssertTrue(appeared, "\(diagnostics)")
        let removedA = try await recordRemovals(on: hostA)
        try await hostB.client.call(PropBusAPI.manager, "DeleteProperty", [.string("eph.del")])
        let gone = await waitForRemoval(of: "eph", removedA, timeout: 15)
        XCTAssertTrue(gone, "\(diagnostics)")
        // The lease, left holding only the lifetime, is revoked: nothing of the key stays in etcd.
        let cleared = await eventually(timeout: 15) {
            ((try? Fleet.allEntries(self.etcd, prefix: self.prefix)) ?? []).allSatisfy { !String(decoding: $0.key, as: UTF8.self).contains("eph.del") }
        }
        XCTAssertTrue(cleared, "\(diagnostics)")
        // The same name can be created again, plain.
        try await hostB.createFleet("eph.del", "i", default: .int32(2))
        let again = try await listed("eph.del", on: hostB)
        XCTAssertNil(again?.metadata["lifetime"], "\(String(describing: again?.metadata))")
    }

    func testALifetimeOfAnExistingFleetKeyIsRefusedNamingIt() async throws {
        try await hostA.createFleet("eph.plain", "i", default: .int32(1))
        await assertDBusError(PropBusAPI.error("Exists"), containing: ["eph.plain", "lifetime"]) {
            try await self.hostA.createFleet("eph.plain", "i", default: .int32(1), options: ["lifetime": .double(60)])
        }
    }
}
