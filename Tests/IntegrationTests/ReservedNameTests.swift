import Foundation
import DBus
import XCTest

/// A key's name is a D-Bus property of `org.propbus.PropBus1.Values` on its group object, next to
/// that interface's methods: a key named like one of them made the method unreachable from
/// pydbus and the property from qdbus. Such names are refused.
final class ReservedNameTests: DaemonTestCase {
    func testKeysNamedLikeTheValuesMethodsAreRefused() async throws {
        for name in ["Reset", "GetWithRevision", "CompareAndSet"] {
            await assertDBusError(PropBusAPI.error("InvalidKey"), containing: ["settings.\(name)", "org.propbus.PropBus1.Values"]) {
                try await self.client.create("settings.\(name)", "i", default: .int32(0))
            }
        }
        // Case matters on D-Bus: a key that only looks alike is an ordinary key.
        try await client.create("settings.reset", "i", default: .int32(1))
        let created = try await tool(BuildProducts.propctl, ["create", "settings.Reset", "i", "--default", "0"])
        XCTAssertFalse(created.succeeded, "\(created)")
        XCTAssertTrue(created.stderr.contains("InvalidKey") || created.stderr.contains("settings.Reset"), "\(created)")
    }

    func testAModelFileDeclaringSuchAKeyIsReportedAndTheOthersApply() async throws {
        let directory = try makeTemporaryDirectory(prefix: "pbit-reserved")
        defer { try? FileManager.default.removeItem(at: directory) }
        let bad = directory.appendingPathComponent("bad.json"), good = directory.appendingPathComponent("good.json")
        try #"{"groups": {"ui": {"properties": {"CompareAndSet": {"type": "i"}}}}}"#.write(to: bad, atomically: true, encoding: .utf8)
        try #"{"groups": {"ok": {"properties": {"fine": {"type": "i"}}}}}"#.write(to: good, atomically: true, encoding: .utf8)
        try await restartDaemon(arguments: ["--model", bad.path, "--model", good.path])
        let listed = try await client.list(prefix: "")
        XCTAssertFalse(listed.contains { $0.key == "ui.CompareAndSet" }, "\(listed)")
        XCTAssertTrue(listed.contains { $0.key == "ok.fine" }, "\(listed)")
        let skipped = try await client.call(PropBusAPI.properties, "Get",
                                            [.string(PropBusAPI.manager), .string("SkippedModelFiles")])
        XCTAssertTrue("\(skipped)".contains("ui.CompareAndSet"), "\(skipped)")
    }
}
