import DBus
import Etcd
import PropBus
@testable import PropBusFleet
@testable import PropBusService
import XCTest

/// The fleet's layers in a running host against a fake etcd: a lock from the watch, and one
/// removed while the host's watch missed it, gone after the full read that follows a compaction.
final class FleetLayersInProcessTests: XCTestCase, @unchecked Sendable {
    private var bus: TestBus!
    private var serviceConnection: Connection!
    private var client: Connection!
    private var service: Service?
    private let etcd = FakeEtcd()
    private let layout = FleetLayout(prefix: "/lab/")
    private let key = try! Key("lab.volume")

    override func setUp() async throws {
        bus = try TestBus.start()
        serviceConnection = try await bus.connect()
        client = try await bus.connect()
        let etcd = etcd, key = key
        // Made and kept on the service's queue: the service is not Sendable.
        try await onQueue(serviceConnection) { [self, serviceConnection] () throws in
            service = try startFleetHost(on: serviceConnection!, store: MemoryStore(), etcd: etcd) { model in
                _ = try model.create(key: key.text, type: "i", defaultValue: .int32(50), options: ["scope": .string("fleet")])
            }
        }
        let layout = layout
        let ready = await eventually(timeout: 10) { etcd.value(of: layout.definitionKey(key)) != nil }
        XCTAssertTrue(ready, "the fleet did not offer its key to the fake etcd")
    }

    override func tearDown() async throws {
        if let serviceConnection {
            _ = await onQueue(serviceConnection) { [self] in
                service?.fleet?.stop()
                service = nil
            }
        }
        serviceConnection?.close()
        client?.close()
        bus?.stop()
    }

    private func value() async throws -> DBusValue {
        let reply = try await client.call(destination: serviceConnection.uniqueName, path: key.objectPath, interface: PropBusAPI.propertiesInterface,
                                          member: "Get", arguments: [.string(PropBusAPI.valuesInterface), .string(key.name)])
        return reply.first?.unwrappingVariantOnce ?? .string("")
    }

    private func isLocked() async -> Bool {
        await onQueue(serviceConnection) { [self] in service?.model.entry(for: key)?.layers?.mandatoryInForce != nil }
    }

    func testALockRemovedWhileTheWatchMissedItGoesWithTheFullReadAfterACompaction() async throws {
        let lock = FleetLayout.encodeLayer(.int32(20), lockedFor: nil, attribution: nil, time: 0)
        _ = try etcd.txn(compares: [], success: [.put(layout.layerKey(.mandatory, key), lock)], failure: [], resendIfConnectionLost: false, timeout: nil)
        let locked = await eventually(timeout: 10) { (try? await self.value()) == .int32(20) }
        XCTAssertTrue(locked, "the lock from the watch was not applied")
        let lockedNow = await isLocked()
        XCTAssertTrue(lockedNow)

        // Removed in etcd without the watch hearing it (it was cut off), then compacted past it.
        let layerKey = layout.layerKey(.mandatory, key)
        let revision = etcd.state.withLock { state -> Int64 in
            state.revision += 1
            state.kvs[layerKey] = nil
            for watch in state.watches { watch.deliver(.compacted(compactRevision: state.revision)) }
            return state.revision
        }
        let unlocked = await eventually(timeout: 10) { (try? await self.value()) == .int32(50) }
        XCTAssertTrue(unlocked, "the full read at revision \(revision) did not remove the lock etcd no longer holds")
        let lockedAfter = await isLocked()
        XCTAssertFalse(lockedAfter)
    }
}
