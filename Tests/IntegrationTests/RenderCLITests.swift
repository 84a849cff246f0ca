import DBus
import Foundation
import XCTest

/// `propctl render list|show|preview|run` as a user runs them, over the Manager's render methods.
final class RenderCLITests: DaemonTestCase, @unchecked Sendable {
    private func path(_ name: String) -> String { bus.directory.appendingPathComponent(name).path }

    private func propctl(_ arguments: [String]) async throws -> CommandResult {
        try await runCommand(BuildProducts.propctl, ["--address", bus.address] + arguments, environment: bus.environment, timeout: 15)
    }

    private func json(_ text: String) -> Any? {
        try? JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed])
    }

    override func setUp() async throws {
        try await super.setUp()
        try #"""
            {"groups": {"web": {"properties": {"port": {"type": "i", "default": 80}, "host": {"type": "s"}}}},
             "renders": {
               "site": {"template_text": "listen {{ web.port }};\n", "destination": "\#(path("site.conf"))", "mode": "0600",
                        "check": ["true", "{{file}}"], "wait": {"min": 0, "max": 0}, "description": "The site"},
               "proxy": {"template_text": "proxy_pass {{ web.host }};\n", "destination": "\#(path("proxy.conf"))", "require": ["web.host"]}
             }}
            """#.write(toFile: path("model.json"), atomically: true, encoding: .utf8)
        try await restartDaemon(arguments: ["--model", path("model.json")])
        _ = await eventually(timeout: 15) { (try? await self.client.get("render.site.State")) == .string("ok") }
    }

    func testListShowsEachRenderWithItsStateAndDestination() async throws {
        let list = try await propctl(["render", "list"])
        XCTAssertEqual(list.status, 0, "\(list)")
        let lines = list.stdout.split(separator: "\n").map(String.init)
        guard lines.count == 2 else { return XCTFail("expected two renders: \(list)") }
        XCTAssertTrue(lines[0].hasPrefix("proxy") && lines[0].contains("waiting-for-keys") && lines[0].contains(path("proxy.conf")), list.stdout)
        XCTAssertTrue(lines[1].hasPrefix("site") && lines[1].contains("ok") && lines[1].contains(path("site.conf")), list.stdout)
        let listed = try await propctl(["--json", "render", "list"])
        let renders = json(listed.stdout) as? [[String: Any]]
        XCTAssertEqual(renders?.compactMap { $0["name"] as? String }, ["proxy", "site"], listed.stdout)
        XCTAssertEqual(renders?.last?["state"] as? String, "ok")
    }

    func testShowDescribesADeclaration() async throws {
        let show = try await propctl(["render", "show", "site"])
        XCTAssertEqual(show.status, 0, "\(show)")
        for expected in ["state: ok", "destination: \(path("site.conf"))", "mode: 0600", "check: true {{file}}", "reads: web.port",
                         "source: \(path("model.json"))", "description: The site"] {
            XCTAssertTrue(show.stdout.contains(expected), "missing \(expected): \(show.stdout)")
        }
        let shown = json(try await propctl(["--json", "render", "show", "proxy"]).stdout) as? [String: Any]
        XCTAssertEqual(shown?["state"] as? String, "waiting-for-keys")
        XCTAssertEqual(shown?["require"] as? [String], ["web.host"])
        XCTAssertEqual(shown?["mode"] as? String, "0644")
    }

    func testPreviewPrintsExactlyWhatWouldBeWrittenAndWritesNothing() async throws {
        try await client.set("web.port", .int32(81))
        let preview = try await propctl(["render", "preview", "site"])
        XCTAssertEqual(preview.status, 0, "\(preview)")
        XCTAssertEqual(preview.stdout, "listen 81;\n")
        let waiting = try await propctl(["render", "preview", "proxy"])
        XCTAssertEqual(waiting.status, 1, "\(waiting)")
        XCTAssertTrue(waiting.stderr.contains("waiting-for-keys") && waiting.stderr.contains("web.host is empty"), waiting.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: path("proxy.conf")))
    }

    func testRunRendersNowAndSaysHowItWent() async throws {
        try await client.set("web.host", .string("10.0.0.1"))
        let run = try await propctl(["render", "run", "proxy"])
        XCTAssertEqual(run.status, 0, "\(run)")
        XCTAssertTrue(run.stdout.hasPrefix("proxy: ok:"), run.stdout)
        XCTAssertEqual(try String(contentsOfFile: path("proxy.conf"), encoding: .utf8), "proxy_pass 10.0.0.1;\n")
        try await client.set("web.host", .string(""))
        let refused = try await propctl(["render", "run", "proxy"])
        XCTAssertEqual(refused.status, 1, "\(refused)")
        XCTAssertTrue(refused.stderr.contains("waiting-for-keys"), refused.stderr)
    }

    func testAnUnknownRenderIsNamedWithTheRendersThereAre() async throws {
        let unknown = try await propctl(["render", "show", "sight"])
        XCTAssertEqual(unknown.status, 1, "\(unknown)")
        XCTAssertTrue(unknown.stderr.contains("no render named sight; the renders are proxy, site"), unknown.stderr)
        let missing = try await propctl(["render", "show"])
        XCTAssertEqual(missing.status, 64, "\(missing)")
        let action = try await propctl(["render", "explode"])
        XCTAssertEqual(action.status, 64, "\(action)")
    }
}
