import DBus
import Etcd
import PropBus
@testable import PropBusFleet
@testable import PropBusService
import XCTest

/// The fleet's layers in a running host against a fake etcd: a lock from the watch, and one
/// removed while the host's watch missed it, gone after the full read that follows a compaction.
final class FleetLayersInProcessTests: FleetHostTestCase, @unchecked Sendable {
    private let layout = FleetLayout(prefix: "/lab/")
    private let key = try! Key("lab.volume")

    override func setUp() async throws {
        let key = key
        try await startHost(store: { MemoryStore() }) { model in
            _ = try model.create(key: key.text, type: "i", defaultValue: .int32(50), options: ["scope": .string("fleet")])
        }
        let etcd = etcd, layout = layout
        let ready = await eventually(timeout: 10) { etcd.value(of: layout.definitionKey(key)) != nil }
        XCTAssertTrue(ready, "the fleet did not offer its key to the fake etcd")
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
