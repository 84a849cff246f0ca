import DBus
import Foundation
import XCTest

/// Who may declare renders and who sees what they write: only root's model files (and
/// templates) declare renders; a secret is rendered only into a file others cannot read, and
/// never reaches a message, the log, a listing or the preview of someone who may not read it.
final class RenderSecurityTests: AccessControlTestCase, @unchecked Sendable {
    private func path(_ name: String) -> String { bus.directory.appendingPathComponent(name).path }
    private let secret = "hunter2-topsecret"

    private func writeModel(_ name: String = "model.json", renders: String) throws {
        try #"""
            {"groups": {"vault": {"properties": {"pin": {"type": "s", "secret": true, "value": "\#(secret)"}, "port": {"type": "i", "default": 1}}}},
             "renders": {\#(renders)}}
            """#.write(toFile: path(name), atomically: true, encoding: .utf8)
    }

    private func state(_ render: String) async throws -> (state: String, message: String) {
        let values = try await client.getAll(group: "render.\(render)")
        return (values["State"]?.stringValue ?? "", values["Message"]?.stringValue ?? "")
    }

    private func waitForState(_ render: String, _ expected: String, file: StaticString = #filePath, line: UInt = #line) async throws -> String {
        var last: (state: String, message: String)?
        _ = await eventually(timeout: 15) {
            last = try? await self.state(render)
            return last?.state == expected
        }
        XCTAssertEqual(last?.state, expected, "\(String(describing: last)); stderr: \(daemon.stderr)", file: file, line: line)
        return last?.message ?? ""
    }

    func testASecretNeverReachesAMessageTheLogOrTheListingsAndOnlyItsReadersPreviewIt() async throws {
        let flag = path("refuse")
        XCTAssertTrue(FileManager.default.createFile(atPath: flag, contents: nil))
        // The check prints the file (as nginx -t quotes a bad line) and refuses while the flag exists.
        try writeModel(renders: #"""
            "vault": {"template_text": "pin={{ vault.pin }}\nport={{ vault.port }}\n", "destination": "\#(path("vault.conf"))", "mode": "0640",
                      "check": ["sh", "-c", "cat \"$1\" >&2; test ! -e \#(flag)", "sh", "{{file}}"]},
            "leaky": {"template_text": "pin={{ vault.pin }}\n", "destination": "\#(path("leaky.conf"))", "mode": "0644"},
            "typed": {"template_text": "{{ int(vault.pin) }}\n", "destination": "\#(path("typed.conf"))", "mode": "0600"}
            """#)
        try await restartDaemon(arguments: daemonArguments + ["--model", path("model.json")])

        let refused = try await waitForState("vault", "check-failed")
        XCTAssertTrue(refused.contains("left out") && refused.contains("secret"), refused)
        XCTAssertNil(try? String(contentsOfFile: path("vault.conf"), encoding: .utf8))
        let leaky = try await waitForState("leaky", "render-failed")
        XCTAssertTrue(leaky.contains("vault.pin") && leaky.contains("0644") && leaky.contains("0640"), leaky)
        XCTAssertFalse(FileManager.default.fileExists(atPath: path("leaky.conf")), "a secret is never written where others can read it")
        let typed = try await waitForState("typed", "render-failed")
        XCTAssertTrue(typed.contains("withheld"), typed)

        try FileManager.default.removeItem(atPath: flag)
        let run = try await tool(BuildProducts.propctl, ["--address", bus.address, "render", "run", "vault"])
        XCTAssertTrue(run.succeeded, "\(run)")
        XCTAssertEqual(try String(contentsOfFile: path("vault.conf"), encoding: .utf8), "pin=\(secret)\nport=1\n")

        // Someone who may not read vault.pin previews it masked; root sees what would be written.
        let masked = try await propctlAsNobody(["render", "preview", "vault"])
        assertSucceeded(masked)
        XCTAssertEqual(masked.stdout, "pin=<secret>\nport=1\n")
        XCTAssertTrue(masked.stderr.contains("masked"), masked.stderr)
        let full = try await tool(BuildProducts.propctl, ["--address", bus.address, "render", "preview", "vault"])
        XCTAssertEqual(full.stdout, "pin=\(secret)\nport=1\n")

        var seen = [daemon.stderr]
        for arguments in [["render", "list"], ["render", "show", "vault"], ["--json", "render", "show", "typed"], ["get", "render.vault.Message"],
                          ["render", "show", "leaky"]] {
            let result = try await propctlAsNobody(arguments)
            assertSucceeded(result)
            seen += [result.stdout, result.stderr]
        }
        for text in seen { XCTAssertFalse(text.contains(secret), "the secret leaked: \(text)") }
    }

    func testAPreviewShowsASecretToItsWritersOnly() async throws {
        try #"""
            {"groups": {"vault": {"properties": {"pin": {"type": "s", "secret": true, "value": "\#(secret)"},
                                                 "token": {"type": "s", "secret": true, "writers": ["nobody"], "value": "nobodys-token"}}}},
             "renders": {"both": {"template_text": "pin={{ vault.pin }} token={{ vault.token }}\n", "destination": "\#(path("both.conf"))", "mode": "0600"}}}
            """#.write(toFile: path("model.json"), atomically: true, encoding: .utf8)
        try await restartDaemon(arguments: daemonArguments + ["--model", path("model.json")])
        _ = try await waitForState("both", "ok")
        let preview = try await propctlAsNobody(["render", "preview", "both"])
        assertSucceeded(preview)
        XCTAssertEqual(preview.stdout, "pin=<secret> token=nobodys-token\n")
    }

    func testRunningARenderNeedsTheDefaultWritersRights() async throws {
        try writeModel(renders: #""plain": {"template_text": "{{ vault.port }}\n", "destination": "\#(path("plain.conf"))"}"#)
        try await restartDaemon(arguments: daemonArguments + ["--model", path("model.json")])
        _ = try await waitForState("plain", "ok")
        let denied = try await propctlAsNobody(["render", "run", "plain"])
        XCTAssertFalse(denied.succeeded)
        XCTAssertTrue(denied.stderr.contains(Self.accessDenied) && denied.stderr.contains("uid 65534 may not"), "\(denied)")
    }

    func testOnlyRootsModelFilesAndTemplatesDeclareRenders() async throws {
        try "{{ vault.port }}\n".write(toFile: path("root.tmpl"), atomically: true, encoding: .utf8)
        try "{{ vault.port }}\n".write(toFile: path("nobody.tmpl"), atomically: true, encoding: .utf8)
        chown(path("nobody.tmpl"), 65534, 65534)
        try #"{"renders": {"a": {"template": "root.tmpl", "destination": "\#(path("a.conf"))"}}}"#
            .write(toFile: path("others.json"), atomically: true, encoding: .utf8)
        chown(path("others.json"), 65534, 65534)
        try #"{"renders": {"b": {"template": "root.tmpl", "destination": "\#(path("b.conf"))"}}}"#
            .write(toFile: path("writable.json"), atomically: true, encoding: .utf8)
        chmod(path("writable.json"), 0o664)
        try #"{"renders": {"c": {"template": "nobody.tmpl", "destination": "\#(path("c.conf"))"}}}"#
            .write(toFile: path("template.json"), atomically: true, encoding: .utf8)
        try #"{"renders": {"d": {"template": "root.tmpl", "destination": "\#(path("d.conf"))"}}}"#
            .write(toFile: path("fine.json"), atomically: true, encoding: .utf8)
        try writeModel("keys.json", renders: "")
        try await restartDaemon(arguments: daemonArguments + ["keys.json", "others.json", "writable.json", "template.json", "fine.json"].flatMap { ["--model", path($0)] })

        let reply = try await client.call(PropBusAPI.manager, "Reload")
        let skipped = String(describing: reply)
        XCTAssertTrue(skipped.contains("others.json") && skipped.contains("owned by uid 65534"), skipped)
        XCTAssertTrue(skipped.contains("writable.json") && skipped.contains("0664"), skipped)
        XCTAssertTrue(skipped.contains("template.json") && skipped.contains("nobody.tmpl"), skipped)
        XCTAssertFalse(skipped.contains("fine.json"), skipped)
        _ = try await waitForState("d", "ok")
        for name in ["a", "b", "c"] { XCTAssertFalse(FileManager.default.fileExists(atPath: path("\(name).conf"))) }
    }
}
