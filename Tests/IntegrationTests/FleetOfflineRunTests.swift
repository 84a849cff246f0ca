import DBus
import Etcd
import Foundation
import PropBus
import XCTest

/// A host started for a while without `--fleet` on a store that mirrors fleet keys serves them
/// as local keys ("scope is just recorded"). Given `--fleet` again, it must come back to the
/// fleet's values and definitions, not keep what it wrote meanwhile: that would be a fork no
/// later write repairs.
final class FleetOfflineRunTests: FleetTestCase {
    func testWritesMadeWithoutFleetGiveWayToTheFleetWhenItIsBack() async throws {
        try await hostA.createFleet("lab.offline.mode", "s", default: .string("auto"))
        try await hostA.createFleet("lab.offline.level", "i", default: .int32(1))
        try await hostA.client.set("lab.offline.mode", .string("day"))
        let mirrored = await hostB.waitFor("lab.offline.mode", .string("day"))
        XCTAssertTrue(mirrored, diagnostics)

        await hostB.stop()
        try await hostB.start(fleet: false)
        try await hostB.client.set("lab.offline.mode", .string("night"))
        try await hostB.client.set("lab.offline.level", .int32(9))
        // A redefinition too (another default), as CreateProperty allows on a local key.
        try await hostB.client.create("lab.offline.mode", "s", default: .string("manual"), options: ["scope": .variant(.string("fleet"))])
        let offline = try await hostB.client.list(prefix: "lab.offline.mode").first { $0.key == "lab.offline.mode" }
        XCTAssertEqual(offline?.metadata["default"], .string("manual"), "the redefinition without --fleet did not take")
        await hostB.stop()

        try await hostB.start()
        let mode = await hostB.waitFor("lab.offline.mode", .string("day"))
        XCTAssertTrue(mode, "B kept the value it wrote without --fleet\n\(diagnostics)")
        let level = await hostB.waitFor("lab.offline.level", .int32(1))
        XCTAssertTrue(level, "B kept the value it wrote without --fleet over the fleet's default\n\(diagnostics)")
        let row = try await hostB.client.list(prefix: "lab.offline.mode").first { $0.key == "lab.offline.mode" }
        XCTAssertEqual(row?.metadata["default"], .string("auto"), "B kept the definition it made without --fleet\n\(diagnostics)")
        // And the fleet did not take B's offline writes.
        let onA = try await hostA.client.get("lab.offline.mode")
        XCTAssertEqual(onA, .string("day"))
    }
}
