import DBus
import Etcd
import Foundation
import XCTest

/// A model file cannot fork a fleet key: a declaration that differs from the definition the
/// fleet holds (another default, other options, local scope) or that sets its value would
/// change one host only, so the file is refused, naming the key, and the fleet's definition
/// stands.
final class FleetModelFileTests: FleetTestCase {
    /// The entry holding `key`'s definition in etcd (`/PREFIX/defs/KEY`).
    private func definitionEntry(_ key: String) throws -> KeyValue? {
        try Fleet.allEntries(etcd, prefix: prefix).first { String(decoding: $0.key, as: UTF8.self) == "/\(prefix)/defs/\(key)" }
    }

    private func writeModel(_ name: String, on host: FleetHost, _ text: String) throws -> URL {
        let file = host.bus.directory.appendingPathComponent(name)
        try text.write(to: file, atomically: true, encoding: .utf8)
        return file
    }

    func testAModelFileDeclaringAFleetKeyWithAnotherDefaultIsRefusedAndTheFleetsDefinitionStands() async throws {
        try await hostA.createFleet("lab.panel.level", "i", default: .int32(50))
        let defined = await hostB.waitFor("lab.panel.level", .int32(50))
        XCTAssertTrue(defined, diagnostics)
        let before = try XCTUnwrap(try definitionEntry("lab.panel.level"), diagnostics)

        // B's file says 70; the fleet (and A) say 50. A local key of the same file shows that
        // the file is refused as a whole, as any bad model file is.
        let model = try writeModel("panel.json", on: hostB, """
            {"groups": {
              "lab.panel": {"properties": {"level": {"type": "i", "default": 70, "scope": "fleet"}}},
              "lab.bside": {"properties": {"note": {"type": "s", "default": "b"}}}
            }}
            """)
        await hostB.stop()
        try await hostB.start(extraArguments: ["--model", model.path])

        let onB = try await hostB.client.get("lab.panel.level")
        XCTAssertEqual(onB, .int32(50), "B took the model file's default for a fleet key: a fork\n\(diagnostics)")
        let onA = try await hostA.client.get("lab.panel.level")
        XCTAssertEqual(onA, .int32(50))
        let after = try XCTUnwrap(try definitionEntry("lab.panel.level"))
        XCTAssertEqual(after.modRevision, before.modRevision, "the model file rewrote the fleet's definition")
        XCTAssertTrue(hostB.stderr.contains("skipped model file \(model.path)") && hostB.stderr.contains("lab.panel.level"),
                      "B's log does not say the file was skipped because of lab.panel.level:\n\(hostB.stderr)")
        let status = try await hostB.propctl(["status"])
        XCTAssertTrue(status.stdout.contains(model.path), "propctl status does not list the skipped file:\n\(status.stdout)")
        let local = try await hostB.client.list(prefix: "lab.bside.")
        XCTAssertEqual(local.map(\.key), [], "a refused file's other declarations were applied")
    }

    func testAReloadCannotMakeAFleetKeyLocalNorSetItsValue() async throws {
        try await hostA.createFleet("lab.panel.mode", "s", default: .string("day"))
        let defined = await hostB.waitFor("lab.panel.mode", .string("day"))
        XCTAssertTrue(defined, diagnostics)

        // The same definition as the fleet's: accepted; but its "value" must not set the fleet
        // key on B alone (the fleet has no value: the default stands).
        let model = try writeModel("mode.json", on: hostB, """
            {"groups": {"lab.panel": {"properties": {"mode": {"type": "s", "default": "day", "scope": "fleet", "value": "night"}}}}}
            """)
        await hostB.stop()
        try await hostB.start(extraArguments: ["--model", model.path])
        let status = try await hostB.propctl(["status"])
        XCTAssertFalse(status.stdout.contains(model.path), "a file that matches the fleet was skipped:\n\(status.stdout)\n\(hostB.stderr)")
        try await Fleet.barrier(from: hostA, to: hostB)
        let initial = try await hostB.client.get("lab.panel.mode")
        XCTAssertEqual(initial, .string("day"), "the file's \"value\" changed a fleet key on B alone\n\(diagnostics)")
        XCTAssertNil(try Fleet.etcdEntry(etcd, prefix: prefix, key: "lab.panel.mode"), "nothing was to be written to etcd")

        // Now the file makes it local: refused at the reload, naming the key.
        _ = try writeModel("mode.json", on: hostB, """
            {"groups": {"lab.panel": {"properties": {"mode": {"type": "s", "default": "day"}}}}}
            """)
        let reload = try await hostB.propctl(["reload"])
        XCTAssertEqual(reload.status, 1, "\(reload)")
        XCTAssertTrue((reload.stdout + reload.stderr).contains("lab.panel.mode"), "\(reload)")
        let listed = try await hostB.client.list(prefix: "lab.panel.")
        XCTAssertEqual(listed.first?.metadata["scope"], .string("fleet"), "B made the fleet key local: \(listed)")

        // Still the fleet's on B: A's write arrives.
        try await hostA.client.set("lab.panel.mode", .string("dusk"))
        let arrived = await hostB.waitFor("lab.panel.mode", .string("dusk"))
        XCTAssertTrue(arrived, "B no longer follows the fleet key\n\(diagnostics)")
    }

    func testOnAHostThatHadNotSeenTheKeyTheFleetsDefinitionAndValueReplaceTheFilesOnConnecting() async throws {
        // B is down when A defines the key: B's mirror does not know it when B reads its file.
        await hostB.stop()
        try await hostA.createFleet("lab.panel.tone", "s", default: .string("warm"))
        let model = try writeModel("tone.json", on: hostB, """
            {"groups": {"lab.panel": {"properties": {"tone": {"type": "s", "default": "cold", "scope": "fleet", "value": "hot"}}}}}
            """)
        try await hostB.start(extraArguments: ["--model", model.path])
        try await Fleet.barrier(from: hostA, to: hostB)

        let value = try await hostB.client.get("lab.panel.tone")
        XCTAssertEqual(value, .string("warm"), "B kept its file's value of a fleet key the fleet had already defined: a fork\n\(diagnostics)")
        let listed = try await hostB.client.list(prefix: "lab.panel.")
        XCTAssertEqual(listed.first?.metadata["default"], .string("warm"), "\(listed)")
        XCTAssertNil(try Fleet.etcdEntry(etcd, prefix: prefix, key: "lab.panel.tone"), "B's file wrote the fleet's value")
        XCTAssertTrue(hostB.stderr.contains("lab.panel.tone") && hostB.stderr.contains(model.path),
                      "B's log does not say the fleet's definition replaced its file's:\n\(hostB.stderr)")
        // From now on the file is refused like any file that differs from the fleet.
        let reload = try await hostB.propctl(["reload"])
        XCTAssertEqual(reload.status, 1, "\(reload)")
    }

    func testABindingAModelFileDeclaresDoesNotWriteAFleetKeyAtLoad() async throws {
        try await hostA.createFleet("lab.panel.label", "s", default: .string("fleet"))
        let defined = await hostB.waitFor("lab.panel.label", .string("fleet"))
        XCTAssertTrue(defined, diagnostics)

        // The fleet key follows a local key of B's: the binding's first sync would write the
        // fleet key at load, outside any call, on B only.
        let model = try writeModel("label.json", on: hostB, """
            {"groups": {"lab.local": {"properties": {"label": {"type": "s", "default": "mine"}}}},
             "bindings": [{"key": "lab.panel.label", "to": "lab.local.label", "direction": "from"}]}
            """)
        await hostB.stop()
        try await hostB.start(extraArguments: ["--model", model.path])
        try await Fleet.barrier(from: hostA, to: hostB)
        let onB = try await hostB.client.get("lab.panel.label")
        XCTAssertEqual(onB, .string("fleet"), "the model file's binding wrote the fleet key on B alone\n\(diagnostics)")
        XCTAssertNil(try Fleet.etcdEntry(etcd, prefix: prefix, key: "lab.panel.label"))

        // A change of its leading side in a call goes to etcd, as any fleet write.
        try await hostB.client.set("lab.local.label", .string("changed"))
        let arrived = await hostA.waitFor("lab.panel.label", .string("changed"))
        XCTAssertTrue(arrived, "the binding no longer carries changes to the fleet\n\(diagnostics)")
    }

    func testAFleetKeyItsFileNoLongerDeclaresStaysOnThatHost() async throws {
        let model = try writeModel("kiosk.json", on: hostA, """
            {"groups": {"lab.sign": {"properties": {"text": {"type": "s", "default": "hello", "scope": "fleet"}}}}}
            """)
        await hostA.stop()
        try await hostA.start(extraArguments: ["--model", model.path])
        let offered = await hostB.waitFor("lab.sign.text", .string("hello"))
        XCTAssertTrue(offered, "A's file did not offer its fleet key\n\(diagnostics)")

        // The file drops it: A's key would leave A's bus while the fleet (and B) keep it.
        _ = try writeModel("kiosk.json", on: hostA, """
            {"groups": {"lab.other": {"properties": {"note": {"type": "s", "default": ""}}}}}
            """)
        let reload = try await hostA.propctl(["reload"])
        XCTAssertTrue(reload.succeeded, "\(reload)")
        try await hostB.client.set("lab.sign.text", .string("from B"))
        let arrived = await hostA.waitFor("lab.sign.text", .string("from B"))
        XCTAssertTrue(arrived, "the fleet key left A when A's file stopped declaring it\n\(diagnostics)")
        let onB = try await hostB.client.get("lab.sign.text")
        XCTAssertEqual(onB, .string("from B"))
    }

    /// A reload whose file makes a local key a fleet key ends the bindings from a command's
    /// state to it (as a start does): otherwise the command's executions drive the fleet key on
    /// this host alone.
    func testAReloadThatMakesAKeyAFleetKeyEndsTheBindingsFromACommandsStateToIt() async throws {
        let model = try writeModel("chore.json", on: hostB, """
            {"groups": {"lab.rchore": {"properties": {"flag": {"type": "b", "default": false}}}}}
            """)
        await hostB.stop()
        try await hostB.start(extraArguments: ["--model", model.path])
        try await bindExecuting(of: "lab.rchore.run", to: "lab.rchore.flag")

        _ = try writeModel("chore.json", on: hostB, """
            {"groups": {"lab.rchore": {"properties": {"flag": {"type": "b", "default": false, "scope": "fleet"}}}}}
            """)
        let reload = try await hostB.propctl(["reload"])
        XCTAssertTrue(reload.succeeded, "\(reload)\n\(hostB.stderr)")
        let offered = await hostA.waitFor("lab.rchore.flag", .boolean(false))
        XCTAssertTrue(offered, diagnostics)

        try await assertExecutingNoLongerDrives("lab.rchore.flag", command: "lab.rchore.run")
    }
}
