import DBus
import Etcd
import Foundation
import XCTest

/// Fleet layers: a fleet-mandatory value and a fleet default of a fleet key, held in
/// etcd (`PREFIX/layers/mandatory/KEY`, `PREFIX/layers/defaults/KEY`) and applied by every host.
/// Both hosts run on a private system bus with `--system-access`, so the writer a lock refuses
/// is `nobody`; propctl runs as root, who may change the fleet's layers.
final class FleetLayerTests: FleetSystemAccessTestCase {
    private func describeField(_ host: FleetHost, _ key: String, _ field: String) async throws -> String {
        let result = try await host.propctl(["describe", key, "--field", field])
        XCTAssertTrue(result.succeeded, "\(host.name): \(result)")
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// `writable` as `describe` tells nobody on `host`.
    private func writableForNobody(_ host: FleetHost, _ key: String) async throws -> String {
        let result = try await asNobody(on: host, BuildProducts.propctl, ["--address", host.bus.address, "describe", key, "--field", "writable"])
        XCTAssertTrue(result.succeeded, "\(host.name): \(result)")
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    private func layerSource(_ kind: String, _ key: String) -> String {
        "fleet \(kind) /\(prefix)/layers/\(kind == "mandatory" ? "mandatory" : "defaults")/\(key)"
    }

    /// `kiosk.volume` (i, default 50), writable by nobody, defined on both hosts.
    private func createVolume() async throws {
        try await hostA.createFleet("kiosk.volume", "i", default: .int32(50), options: ["writers": .array(of: .string, [.string("nobody")])])
        let defined = await hostB.waitFor("kiosk.volume", .int32(50))
        XCTAssertTrue(defined, diagnostics)
    }

    func testAFleetLockShowsOnBothHostsRefusesSetsAndUnlockBringsTheUserValueBackWithOneSignalEach() async throws {
        try await createVolume()
        let userSet = try await setAsNobody(on: hostA, "kiosk.volume", "55")
        XCTAssertTrue(userSet.succeeded, "\(userSet)")
        let arrived = await hostB.waitFor("kiosk.volume", .int32(55))
        XCTAssertTrue(arrived, diagnostics)
        let userRevision = try XCTUnwrap(try Fleet.etcdEntry(etcd, prefix: prefix, key: "kiosk.volume"), diagnostics).modRevision
        let changesA = try await hostA.client.recordChanges(ofGroup: "kiosk")
        let changesB = try await hostB.client.recordChanges(ofGroup: "kiosk")
        let locksB = try await hostB.client.record(path: PropBusAPI.rootPath, interface: PropBusAPI.manager, member: "LocksChanged")

        let lock = try await hostA.propctl(["lock", "kiosk.volume", "20", "--fleet"])
        XCTAssertTrue(lock.succeeded, "\(lock)\n\(diagnostics)")
        // Answered once A applied it: A reads it at once.
        let onA = try await hostA.client.get("kiosk.volume")
        XCTAssertEqual(onA, .int32(20), diagnostics)
        let lockedOnB = await hostB.waitFor("kiosk.volume", .int32(20))
        XCTAssertTrue(lockedOnB, diagnostics)
        for host in [hostA!, hostB!] {
            let layer = try await describeField(host, "kiosk.volume", "layer")
            XCTAssertEqual(layer, "mandatory", host.name)
            let source = try await describeField(host, "kiosk.volume", "layer_source")
            XCTAssertEqual(source, layerSource("mandatory", "kiosk.volume"), host.name)
            let locked = try await describeField(host, "kiosk.volume", "locked")
            XCTAssertEqual(locked, "true", host.name)
            let user = try await describeField(host, "kiosk.volume", "user_value")
            XCTAssertEqual(user, "55", host.name)
            let writable = try await writableForNobody(host, "kiosk.volume")
            XCTAssertEqual(writable, "false", "\(host.name): writability tells nobody the truth")
            let refused = try await setAsNobody(on: host, "kiosk.volume", "56")
            XCTAssertFalse(refused.succeeded, "\(host.name): \(refused)")
            XCTAssertTrue(refused.stderr.contains(PropBusAPI.error("Locked")), "\(host.name): \(refused)")
            XCTAssertTrue(refused.stderr.contains(layerSource("mandatory", "kiosk.volume")), "\(host.name): \(refused)")
        }
        let listed = try await hostB.propctl(["list", "--locked"])
        XCTAssertTrue(listed.stdout.contains("kiosk.volume"), "\(listed)")
        // The refused writes reached no etcd value: the user's 55 is kept there.
        let entry = try XCTUnwrap(try Fleet.etcdEntry(etcd, prefix: prefix, key: "kiosk.volume"), diagnostics)
        XCTAssertEqual(entry.modRevision, userRevision, diagnostics)

        let unlock = try await hostB.propctl(["unlock", "kiosk.volume", "--fleet"])
        XCTAssertTrue(unlock.succeeded, "\(unlock)\n\(diagnostics)")
        let backOnA = await hostA.waitFor("kiosk.volume", .int32(55))
        XCTAssertTrue(backOnA, diagnostics)
        let backOnB = try await hostB.client.get("kiosk.volume")
        XCTAssertEqual(backOnB, .int32(55))
        try await Fleet.barrier(from: hostB, to: hostA)
        try await Fleet.barrier(from: hostA, to: hostB)
        XCTAssertEqual(changesA.signals.map(\.changed), [["volume": .int32(20)], ["volume": .int32(55)]], "A: \(changesA.signals)")
        XCTAssertEqual(changesB.signals.map(\.changed), [["volume": .int32(20)], ["volume": .int32(55)]], "B: \(changesB.signals)")
        XCTAssertEqual(locksB.signals.count, 2, "B: writability changed twice: \(locksB.signals)")
        let lockedAfter = try await describeField(hostB, "kiosk.volume", "locked")
        XCTAssertNotEqual(lockedAfter, "true")
        let writableAfter = try await writableForNobody(hostA, "kiosk.volume")
        XCTAssertEqual(writableAfter, "true")

        // History on B names the layer, the host and the call that set and removed it.
        let history = try await hostB.propctl(["--json", "history", "kiosk.volume"])
        XCTAssertTrue(history.succeeded, "\(history)")
        let rows = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(history.stdout.utf8)) as? [[String: Any]], history.stdout)
        let vias = rows.compactMap { $0["via"] as? String }
        let etcdKey = "/\(prefix)/layers/mandatory/kiosk.volume"
        XCTAssertTrue(vias.contains("fleet layer mandatory \(etcdKey) from fleet-host-a (SetFleetLayer)"), "\(vias)")
        XCTAssertTrue(vias.contains("fleet layer mandatory \(etcdKey) removed from fleet-host-b (RemoveFleetLayer)"), "\(vias)")
        let removal = try XCTUnwrap(rows.last { ($0["via"] as? String)?.contains("removed") == true }, "\(rows)")
        XCTAssertEqual(removal["user"] as? String, "root", "\(removal)")
        XCTAssertEqual(removal["host"] as? String, "fleet-host-b", "\(removal)")
    }

    func testAFleetDefaultUnderAUserValueShowsOnlyAfterTheUserValueIsReset() async throws {
        try await createVolume()
        try await hostA.client.set("kiosk.volume", .int32(70))
        let arrived = await hostB.waitFor("kiosk.volume", .int32(70))
        XCTAssertTrue(arrived, diagnostics)
        let changesB = try await hostB.client.recordChanges(ofGroup: "kiosk")

        let setDefault = try await hostA.propctl(["lock", "kiosk.volume", "30", "--default", "--fleet"])
        XCTAssertTrue(setDefault.succeeded, "\(setDefault)\n\(diagnostics)")
        try await Fleet.barrier(from: hostA, to: hostB)
        let stillUser = try await hostB.client.get("kiosk.volume")
        XCTAssertEqual(stillUser, .int32(70))
        XCTAssertEqual(changesB.signals.map(\.changed), [], "a default under a user value changes nothing clients see")
        // Not a lock: nobody may still write it.
        let allowed = try await setAsNobody(on: hostB, "kiosk.volume", "71")
        XCTAssertTrue(allowed.succeeded, "\(allowed)")

        try await hostA.client.reset("kiosk.volume")
        let fallback = await hostB.waitFor("kiosk.volume", .int32(30))
        XCTAssertTrue(fallback, diagnostics)
        let layer = try await describeField(hostB, "kiosk.volume", "layer")
        XCTAssertEqual(layer, "site")
        let source = try await describeField(hostB, "kiosk.volume", "layer_source")
        XCTAssertEqual(source, layerSource("default", "kiosk.volume"))
        let locked = try await describeField(hostB, "kiosk.volume", "locked")
        XCTAssertEqual(locked, "false")

        let remove = try await hostB.propctl(["unlock", "kiosk.volume", "--default", "--fleet"])
        XCTAssertTrue(remove.succeeded, "\(remove)\n\(diagnostics)")
        let definitionDefault = await hostA.waitFor("kiosk.volume", .int32(50))
        XCTAssertTrue(definitionDefault, diagnostics)
    }

    func testAHostStartedAfterAFleetLockReadsItAtStart() async throws {
        try await createVolume()
        try await hostA.client.set("kiosk.volume", .int32(55))
        let arrived = await hostB.waitFor("kiosk.volume", .int32(55))
        XCTAssertTrue(arrived, diagnostics)
        await hostB.stop()
        let lock = try await hostA.propctl(["lock", "kiosk.volume", "20", "--fleet", "--for", "nobody"])
        XCTAssertTrue(lock.succeeded, "\(lock)\n\(diagnostics)")
        try await hostB.start()
        let locked = await hostB.waitFor("kiosk.volume", .int32(20))
        XCTAssertTrue(locked, "B, started after the lock, does not apply it\n\(diagnostics)")
        let refused = try await setAsNobody(on: hostB, "kiosk.volume", "56")
        XCTAssertTrue(refused.stderr.contains(PropBusAPI.error("Locked")), "\(refused)")
        // "for": root is outside the list and writes the (hidden) user value.
        try await hostB.client.set("kiosk.volume", .int32(60))
        let user = try await describeField(hostB, "kiosk.volume", "user_value")
        XCTAssertEqual(user, "60")
    }

    func testOnlyPrivilegedCallersChangeTheFleetLayers() async throws {
        try await createVolume()
        let denied = try await asNobody(on: hostA, BuildProducts.propctl, ["--address", hostA.bus.address, "lock", "kiosk.volume", "20", "--fleet"])
        XCTAssertFalse(denied.succeeded, "\(denied)")
        XCTAssertTrue(denied.stderr.contains(PropBusAPI.standard("AccessDenied")), "\(denied)")
        XCTAssertTrue(denied.stderr.contains("kiosk.volume"), "\(denied)")
        let busctl = try await asNobody(on: hostA, "busctl", ["--address=\(hostA.bus.address)", "--", "call", PropBusAPI.busName, PropBusAPI.rootPath,
                                                              PropBusAPI.manager, "RemoveFleetLayer", "ss", "mandatory", "kiosk.volume"])
        // sd-bus prints a standard error by its errno's text.
        XCTAssertFalse(busctl.succeeded, "\(busctl)")
        XCTAssertTrue(busctl.stderr.contains("Access denied"), "\(busctl)")
        // Nothing reached etcd: a barrier write from A, then etcd's layers.
        try await Fleet.barrier(from: hostA, to: hostB)
        let layers = try etcd.range(RangeRequest(key: Array("/\(prefix)/layers/".utf8), prefix: true))
        XCTAssertEqual(layers.kvs.count, 0, diagnostics)
    }

    func testAGroupPrefixFleetLockLocksEveryFleetKeyOfTheGroupOnBothHostsAndKeysCreatedLater() async throws {
        try await createVolume()
        let writers: [String: DBusValue] = ["writers": .array(of: .string, [.string("nobody")])]
        try await hostA.createFleet("kiosk.brightness", "i", default: .int32(80), options: writers)
        let defined = await hostB.waitFor("kiosk.brightness", .int32(80))
        XCTAssertTrue(defined, diagnostics)

        let lock = try await hostA.propctl(["lock", "kiosk.*", "20", "--fleet"])
        XCTAssertTrue(lock.succeeded, "\(lock)\n\(diagnostics)")
        // A key created afterwards, on the other host, is locked as well.
        try await hostB.createFleet("kiosk.contrast", "i", default: .int32(1), options: writers)
        for host in [hostA!, hostB!] {
            for key in ["kiosk.volume", "kiosk.brightness", "kiosk.contrast"] {
                let locked = await host.waitFor(key, .int32(20))
                XCTAssertTrue(locked, "\(host.name): \(key)\n\(diagnostics)")
                let source = try await describeField(host, key, "layer_source")
                XCTAssertEqual(source, layerSource("mandatory", "kiosk.*"), "\(host.name): \(key)")
                let refused = try await setAsNobody(on: host, key, "56")
                XCTAssertTrue(refused.stderr.contains(PropBusAPI.error("Locked")), "\(host.name): \(key): \(refused)")
            }
        }

        // A value one fleet key of the group refuses is refused, naming that key.
        do {
            _ = try await hostA.client.call(PropBusAPI.manager, "SetFleetLayer", [.string("mandatory"), .string("kiosk.*"), .variant(.string("loud")),
                                                                                   .array(of: .string, [])])
            XCTFail("a string lock of integer keys was taken")
        } catch let error as DBusError {
            XCTAssertEqual(error.name, PropBusAPI.standard("InvalidArgs"), "\(error)")
            XCTAssertTrue(error.message.contains("kiosk.*") && error.message.contains("kiosk.brightness"), "\(error)")
        }

        let unlock = try await hostB.propctl(["unlock", "kiosk.*", "--fleet"])
        XCTAssertTrue(unlock.succeeded, "\(unlock)\n\(diagnostics)")
        let again = try await hostB.propctl(["unlock", "kiosk.*", "--fleet"])
        XCTAssertFalse(again.succeeded, "\(again)")
        XCTAssertTrue(again.stderr.contains("kiosk.* has no fleet mandatory value"), "\(again)")
        for host in [hostA!, hostB!] {
            for (key, value) in [("kiosk.volume", 50), ("kiosk.brightness", 80), ("kiosk.contrast", 1)] {
                let back = await host.waitFor(key, .int32(Int32(value)))
                XCTAssertTrue(back, "\(host.name): \(key)\n\(diagnostics)")
            }
        }

        // A group default, under the keys' user values.
        try await hostA.client.set("kiosk.brightness", .int32(90))
        let setDefault = try await hostA.propctl(["lock", "kiosk.*", "30", "--default", "--fleet"])
        XCTAssertTrue(setDefault.succeeded, "\(setDefault)\n\(diagnostics)")
        let fallback = await hostB.waitFor("kiosk.contrast", .int32(30))
        XCTAssertTrue(fallback, diagnostics)
        let kept = try await hostB.client.get("kiosk.brightness")
        XCTAssertEqual(kept, .int32(90), "a default is under the user value")
        let source = try await describeField(hostB, "kiosk.volume", "layer_source")
        XCTAssertEqual(source, layerSource("default", "kiosk.*"))
    }
}
