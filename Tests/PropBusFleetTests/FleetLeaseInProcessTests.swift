import DBus
import Etcd
import PropBus
@testable import PropBusFleet
@testable import PropBusService
import StoreTestSupport
import XCTest

/// Ephemeral fleet keys in this process against a fake etcd: what a host does with
/// the lifetimes etcd holds when it starts, without timing. The host is "a"; etcd already holds
/// one connection-lifetime key of a's (from before a restart, or a kill -9 and a quick start:
/// its creator's connection is gone) and one of host b's.
final class FleetLeaseInProcessTests: FleetHostTestCase, @unchecked Sendable {
    private let layout = FleetLayout(prefix: "/lab/")
    private var ownLease: Int64 = 0
    private var otherLease: Int64 = 0

    /// Puts `key`'s definition and its lifetime (of `host`, the creator's connection) on a new lease.
    private func seed(_ key: String, host: String) throws -> Int64 {
        let key = try Key(key)
        let lease = try etcd.grantLease(ttl: Fleet.connectionLeaseTTL).id
        var definition = PropertyDefinition(key: key, type: try DBusType(parsing: "i"), defaultValue: .int32(1))
        definition.scope = .fleet
        let lifetime = FleetLifetime(lease: lease, ttl: Fleet.connectionLeaseTTL, host: host,
                                     holder: LeaseHolder(busName: ":1.9", userID: 1000, host: host), since: 1, expires: nil)
        _ = try etcd.txn(compares: [], success: [.put(layout.definitionKey(key), FleetLayout.encodeDefinition(definition), lease: lease),
                                                 .put(layout.lifetimeKey(key), lifetime.encoded(), lease: lease)],
                         failure: [], resendIfConnectionLost: false, timeout: nil)
        return lease
    }

    override func setUp() async throws {
        ownLease = try seed("eph.mine", host: "a")
        otherLease = try seed("eph.theirs", host: "b")
        try await startHost(store: { RefusingStore() })
    }

    /// Whether the host's model has `key`, and the lifetime it shows for it.
    private func onHost(_ key: String) async -> (exists: Bool, lifetime: PropBus.Lease?) {
        await onQueue(serviceConnection) { [self] () -> (Bool, PropBus.Lease?) in
            guard let service, let key = try? Key(key), let entry = service.model.entry(for: key) else { return (false, nil) }
            return (true, service.fleet?.lifetime(of: entry.definition))
        }
    }

    func testAStartedHostRevokesItsOwnConnectionLifetimesFromBeforeAndShowsTheOthers() async throws {
        let revoked = await eventually(timeout: 10) { self.etcd.state.withLock { $0.revoked } == [self.ownLease] }
        XCTAssertTrue(revoked, "revoked: \(etcd.state.withLock { $0.revoked }), own lease \(ownLease)")
        let mineGone = await eventually(timeout: 10) { await !self.onHost("eph.mine").exists }
        XCTAssertTrue(mineGone, "the host's own key from before its start is still there")
        let theirs = await onHost("eph.theirs")
        XCTAssertTrue(theirs.exists)
        XCTAssertEqual(theirs.lifetime?.holder.host, "b", "another host's ephemeral key shows its lifetime here")
        XCTAssertEqual(theirs.lifetime?.handle, UInt64(bitPattern: otherLease))
        XCTAssertNil(theirs.lifetime?.expires)
        XCTAssertNotNil(etcd.value(of: layout.lifetimeKey(try Key("eph.theirs"))), "another host's lease is not this host's to end")
    }

    func testAnotherHostsLeaseEndingDeletesItsKeyHere() async throws {
        let appeared = await eventually(timeout: 10) { await self.onHost("eph.theirs").exists }
        XCTAssertTrue(appeared)
        try etcd.revoke(lease: otherLease)
        let gone = await eventually(timeout: 10) { await !self.onHost("eph.theirs").exists }
        XCTAssertTrue(gone, "b's key stays after its lease ended")
    }
}
