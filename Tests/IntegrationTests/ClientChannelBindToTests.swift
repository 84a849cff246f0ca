import DBus
import Foundation
import XCTest

/// `propctl bind --to`, `propctl bindings` and `propctl unbind`: daemon-side bindings driven
/// from the command line.
final class ClientChannelBindToTests: DaemonTestCase, @unchecked Sendable {
    private func propctl(_ arguments: [String]) async throws -> CommandResult {
        try await tool(BuildProducts.propctl, ["--address", bus.address] + arguments)
    }

    private func waitFor(_ key: String, _ value: DBusValue) async -> Bool {
        await eventually(timeout: 10) { (try? await self.client.get(key)) == value }
    }

    private func bindingRows() async throws -> [[String]] {
        let listed = try await propctl(["bindings"])
        XCTAssertEqual(listed.status, 0, "\(listed)")
        return listed.stdout.split(separator: "\n").map { $0.split(separator: "\t").map(String.init) }
    }

    /// Transforms hold blanks and quotes: each option is NAME='TEXT' (shell-quoted), the options
    /// separated by a blank, so they read apart and paste back into a shell.
    func testBindingsPrintsTransformsQuotedAndSeparated() async throws {
        try await client.create("ui.valueA", "s", default: .string("Off"))
        try await client.create("model.valueB", "s", default: .string("1"))
        let bind = try await propctl(["bind", "ui.valueA", "--to", "model.valueB", "--persist",
                                      "--map", #"value == "1" ? "On" : "Off""#, "--unmap", #"value == "On" ? "1" : "0""#])
        XCTAssertEqual(bind.status, 0, "\(bind)")
        let rows = try await bindingRows()
        XCTAssertEqual(rows.first?.last,
                       #"direction=both persistent=true state=active to_key='value == "1" ? "On" : "Off"' to_target='value == "On" ? "1" : "0"'"#,
                       "\(rows)")
    }

    func testPersistentBindingPrintsItsPathIsListedAndUnbinds() async throws {
        try await client.create("ui.switch.on", "b", default: .boolean(false))
        try await client.create("settings.someBoolKey", "b", default: .boolean(true))
        let bind = try await propctl(["bind", "ui.switch.on", "--to", "settings.someBoolKey", "--persist"])
        XCTAssertEqual(bind.status, 0, "\(bind)")
        let path = bind.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertTrue(path.hasPrefix(PropBusAPI.rootPath + "/bindings/"), path)
        let followed = await waitFor("ui.switch.on", .boolean(true))
        XCTAssertTrue(followed, "the key did not take the value it follows")
        let value = try await client.get("settings.someBoolKey")
        XCTAssertEqual(value, .boolean(true))

        let rows = try await bindingRows()
        XCTAssertEqual(rows.count, 1, "\(rows)")
        XCTAssertEqual(Array(rows.first?.prefix(3) ?? []), [path, "ui.switch.on", "settings.someBoolKey"])
        XCTAssertTrue(rows.first?.last?.contains("persistent=true") ?? false, "\(rows)")

        let json = try await propctl(["--json", "bindings"])
        let parsed = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [[String: Any]]
        XCTAssertEqual(parsed?.first?["path"] as? String, path)
        XCTAssertEqual(parsed?.first?["to"] as? String, "settings.someBoolKey")

        try await client.set("settings.someBoolKey", .boolean(false))
        let followedAgain = await waitFor("ui.switch.on", .boolean(false))
        XCTAssertTrue(followedAgain)

        let number = String(path.split(separator: "/").last ?? "")
        let unbind = try await propctl(["unbind", number])
        XCTAssertEqual(unbind.status, 0, "\(unbind)")
        let remaining = try await bindingRows()
        XCTAssertEqual(remaining, [])
        // A daemon-side binding propagates in the Set's own round: once Set has returned, a
        // binding still there would already have changed the key. No sleep needed.
        try await client.set("settings.someBoolKey", .boolean(true))
        let unbound = try await client.get("ui.switch.on")
        XCTAssertEqual(unbound, .boolean(false), "the binding still propagates after unbind")
    }

    func testTransientBindingLastsAsLongAsPropctlRuns() async throws {
        try await client.create("ui.level", "i", default: .int32(0))
        try await client.create("settings.level", "i", default: .int32(5))
        let bind = try ChildProcess(BuildProducts.propctl, ["--address", bus.address, "bind", "ui.level", "--to", "settings.level"],
                                    environment: bus.environment)
        let printed = await eventually(timeout: 10) { bind.stdout.hasSuffix("\n") || !bind.isRunning }
        XCTAssertTrue(printed && bind.isRunning, "stdout: \(bind.stdout) stderr: \(bind.stderr)")
        let initial = await waitFor("ui.level", .int32(5))
        XCTAssertTrue(initial)
        try await client.set("ui.level", .int32(9))
        let back = await waitFor("settings.level", .int32(9))
        XCTAssertTrue(back, "a change of KEY did not reach KEY2")
        let rows = try await bindingRows()
        XCTAssertEqual(rows.count, 1)

        let ended = await bind.stop()
        XCTAssertEqual(ended, .exited(0), "propctl should end cleanly on SIGTERM: \(bind.stderr)")
        let gone = await eventually(timeout: 10) { ((try? await self.bindingRows()) ?? [[]]).isEmpty }
        XCTAssertTrue(gone, "the binding outlived its client")
    }

    func testMapAndUnmapBecomeTheDaemonTransforms() async throws {
        try await client.create("ui.power", "s", default: .string(""))
        try await client.create("device.power", "s", default: .string("1"))
        let bind = try await propctl(["bind", "ui.power", "--to", "device.power", "--persist", "--direction", "both",
                                      "--map", #"value == "1" ? "On" : "Off""#, "--unmap", #"value == "On" ? "1" : "0""#])
        XCTAssertEqual(bind.status, 0, "\(bind)")
        let mapped = await waitFor("ui.power", .string("On"))
        XCTAssertTrue(mapped)
        try await client.set("ui.power", .string("Off"))
        let unmapped = await waitFor("device.power", .string("0"))
        XCTAssertTrue(unmapped)
        let rows = try await bindingRows()
        XCTAssertTrue(rows.first?.last?.contains("to_key=") ?? false, "\(rows)")
        XCTAssertTrue(rows.first?.last?.contains("to_target=") ?? false, "\(rows)")
    }

    func testUnbindErrors() async throws {
        let malformed = try await propctl(["unbind", "not a path"])
        XCTAssertEqual(malformed.status, 64, "\(malformed)")
        let unknown = try await propctl(["unbind", "/org/propbus/PropBus1/bindings/999"])
        XCTAssertEqual(unknown.status, 1, "\(unknown)")
        let badExpression = try await propctl(["bind", "a.b", "--to", "c.d", "--map", "value +"])
        XCTAssertEqual(badExpression.status, 64, "\(badExpression)")
    }
}
