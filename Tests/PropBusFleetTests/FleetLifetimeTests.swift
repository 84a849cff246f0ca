import DBus
import Etcd
import PropBus
@testable import PropBusFleet
@testable import PropBusService
import XCTest

/// The pure parts of ephemeral fleet keys: a lifetime as etcd holds it, and a
/// write's txn with the keys' etcd leases attached.
final class FleetLifetimeTests: XCTestCase {
    let layout = FleetLayout(prefix: "/pb/")
    let key = try! Key("eph.k")

    private func lifetime(lease: Int64 = 0x694d_1234_5678, expires: UInt64? = nil) -> FleetLifetime {
        FleetLifetime(lease: lease, ttl: expires == nil ? Fleet.connectionLeaseTTL : 3, host: "host-a",
                      holder: LeaseHolder(busName: ":1.42", userID: 1000, processID: 812, command: "propctl", host: "host-a"),
                      since: 1_764_000_000_000_000_000, expires: expires)
    }

    func testALifetimeReadsBackAsItWasWrittenWithItsHost() throws {
        for record in [lifetime(), lifetime(expires: 1_764_000_003_000_000_000)] {
            XCTAssertEqual(try FleetLifetime.decode(record.encoded()), record)
        }
        let shown = lifetime().lease(of: key)
        XCTAssertEqual(shown.handle, 0x694d_1234_5678, "the etcd lease id is the lifetime's handle on every host")
        XCTAssertNil(shown.expires)
        XCTAssertEqual(shown.holder.host, "host-a")
    }

    func testAnUnreadableLifetimeIsRefusedNotGuessed() {
        XCTAssertThrowsError(try FleetLifetime.decode([1, 2, 3]))
        XCTAssertThrowsError(try FleetLifetime.decode(ValueCodec.encode(.vardict(["lease": .int64(1)]))))
    }

    func testALifetimeKeyNamesItsKeyAndNothingElseDoes() {
        XCTAssertEqual(layout.lifetimeSubject(layout.lifetimeKey(key)), key)
        XCTAssertNil(layout.lifetimeSubject(layout.definitionKey(key)))
        XCTAssertNil(layout.lifetimeSubject(layout.lifetimesPrefix))
        XCTAssertEqual(layout.classify(layout.lifetimeKey(key)), .other, "older hosts ignore lifetimes")
    }

    func testACreationPutsItsDefinitionValueAndLifetimeOnTheLease() {
        var plan = FleetLayout.Transaction()
        plan.success = [.put(layout.definitionKey(key), [1]), .put(layout.valueKey(key), [2]), .put(layout.valueKey(try! Key("other.k")), [3])]
        plan.writesDefinition = [key]
        let record = lifetime()
        let attached = layout.attachingLifetimes(to: plan, lease: { $0 == self.key ? record.lease : nil }, creating: [key: record])
        XCTAssertEqual(attached.success, [
            .put(layout.definitionKey(key), [1], lease: record.lease),
            .put(layout.valueKey(key), [2], lease: record.lease),
            .put(layout.valueKey(try! Key("other.k")), [3]),
            .put(layout.lifetimeKey(key), record.encoded(), lease: record.lease),
        ])
    }

    func testALaterSetKeepsTheValueOnTheLeaseAndADeletionIsLeftAlone() {
        var plan = FleetLayout.Transaction()
        plan.success = [.put(layout.valueKey(key), [2]), .delete(layout.definitionKey(try! Key("gone.k")))]
        let attached = layout.attachingLifetimes(to: plan, lease: { $0 == self.key ? 77 : nil }, creating: [:])
        XCTAssertEqual(attached.success, [.put(layout.valueKey(key), [2], lease: 77), .delete(layout.definitionKey(try! Key("gone.k")))])
    }
}
