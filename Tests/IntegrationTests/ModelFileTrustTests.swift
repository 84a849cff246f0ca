import DBus
import Foundation
import XCTest

/// What a model file can make the daemon say, read, accept and keep.
/// Problems never quote a refused value (anyone may read `SkippedModelFiles`); only regular files
/// of a bounded size are read, so a reload always answers; a NUL byte is refused in every text
/// field; and a reload whose commit fails leaves nothing of itself in the live model.
final class ModelFileTrustTests: AccessControlTestCase, @unchecked Sendable {
    private func modelURL(_ name: String) -> URL { bus.directory.appendingPathComponent(name) }
    private var storePath: String { bus.directory.appendingPathComponent("state/propbus.db").path }

    private func write(_ name: String, _ text: String) throws {
        try text.write(to: modelURL(name), atomically: true, encoding: .utf8)
    }

    private func write(_ name: String, group: String, _ properties: String) throws {
        try write(name, #"{"groups": {"\#(group)": {"properties": {\#(properties)}}}}"#)
    }

    /// Restarts the daemon with `--system-access` and these model files.
    private func restart(models names: [String]) async throws {
        try await restartDaemon(arguments: daemonArguments + names.flatMap { ["--model", modelURL($0).path] })
    }

    private func reload() async throws -> [(path: String, reason: String)] {
        let reply = try await client.call(PropBusAPI.manager, "Reload")
        guard case .array(_, let items)? = reply.first else { return [] }
        return items.compactMap { item in
            guard case .structure(let fields) = item, fields.count == 2,
                  let path = fields[0].stringValue, let reason = fields[1].stringValue else { return nil }
            return (path, reason)
        }
    }

    // MARK: Defect 9: no refused value in SkippedModelFiles, Reload's reply, status or the log

    func testSkippedModelFilesReloadReplyStatusAndLogNeverQuoteARefusedSecretValue() async throws {
        let secrets = ["hunter2-token", "hunter3-token", "424242"]
        try write("ok.json", group: "app", #""x": {"type": "i", "default": 1}"#)
        try await restart(models: ["ok.json", "choice.json", "type.json", "range.json"])
        // Refused by the choices, by the type, by the range: three files, three problems.
        try write("choice.json", group: "vault", #""pin": {"type": "s", "secret": true, "choices": ["a", "b"], "value": "hunter2-token"}"#)
        try write("type.json", group: "vault2", #""code": {"type": "i", "default": "hunter3-token", "secret": true}"#)
        try write("range.json", group: "vault3", #""level": {"type": "i", "secret": true, "minimum": 0, "maximum": 10, "default": 424242}"#)

        let skipped = try await reload()
        XCTAssertEqual(skipped.map(\.path).sorted(), ["choice.json", "range.json", "type.json"].map { modelURL($0).path })
        let replyText = skipped.map(\.reason).joined(separator: "\n")
        for secret in secrets { XCTAssertFalse(replyText.contains(secret), "Reload's reply quotes \(secret): \(replyText)") }
        for key in ["vault.pin", "vault2.code", "vault3.level"] { XCTAssertTrue(replyText.contains(key), "\(key) is not named: \(replyText)") }
        XCTAssertTrue(replyText.contains("value refused"), replyText)

        let property = try await busctlAsNobody(["get-property", PropBusAPI.busName, PropBusAPI.rootPath, PropBusAPI.manager, "SkippedModelFiles"])
        assertSucceeded(property)
        XCTAssertTrue(property.stdout.contains("vault.pin"), property.stdout)
        let status = try await propctlAsNobody(["status"])
        assertSucceeded(status)
        XCTAssertTrue(status.stdout.contains("choice.json"), status.stdout)
        let log = daemon.stderr
        XCTAssertTrue(log.contains("choice.json"), log)
        for secret in secrets {
            XCTAssertFalse(property.stdout.contains(secret), "SkippedModelFiles quotes \(secret): \(property.stdout)")
            XCTAssertFalse(status.stdout.contains(secret) || status.stderr.contains(secret), "status quotes \(secret): \(status)")
            XCTAssertFalse(log.contains(secret), "the log quotes \(secret): \(log)")
        }
    }

    func testSkippedModelFilesChangeIsAnnouncedWithPropertiesChanged() async throws {
        try write("ok.json", group: "app", #""x": {"type": "i", "default": 1}"#)
        try await restart(models: ["ok.json"])
        let changes = try await client.record(path: PropBusAPI.rootPath, interface: PropBusAPI.properties, member: "PropertiesChanged")
        try write("ok.json", "{")
        let skipped = try await reload()
        XCTAssertEqual(skipped.count, 1)
        // As a GDBusProxy sees it: the name in changed_properties (with the new list) or in
        // invalidated_properties, on the Manager interface of the root object.
        func announces(_ signal: ReceivedSignal) -> Bool {
            signal.arguments.first?.stringValue == PropBusAPI.manager
                && (signal.changed["SkippedModelFiles"] != nil || signal.invalidated.contains("SkippedModelFiles"))
        }
        let received = await changes.wait { $0.contains(where: announces) }
        XCTAssertTrue(received.contains(where: announces), "no PropertiesChanged for SkippedModelFiles: \(received)")
        let listed = received.first(where: announces)?.changed["SkippedModelFiles"]
        if case .array(_, let items)? = listed { XCTAssertEqual(items.count, 1) }

        // And again when the file is good once more (the list empties).
        try write("ok.json", group: "app", #""x": {"type": "i", "default": 1}"#)
        let before = changes.signals.filter(announces).count
        _ = try await reload()
        let again = await changes.wait { $0.filter(announces).count > before }
        XCTAssertGreaterThan(again.filter(announces).count, before, "no PropertiesChanged when the list empties: \(again)")
    }

    /// A GDBusProxy on the Manager: its cached `SkippedModelFiles` must follow a reload.
    private static let proxyScript = #"""
import sys
from gi.repository import Gio, GLib
conn = Gio.DBusConnection.new_for_address_sync(sys.argv[1],
    Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION, None, None)
NAME, ROOT, MANAGER = "org.propbus.PropBus1", "/org/propbus/PropBus1", "org.propbus.PropBus1.Manager"
proxy = Gio.DBusProxy.new_sync(conn, Gio.DBusProxyFlags.NONE, None, NAME, ROOT, MANAGER, None)
before = proxy.get_cached_property("SkippedModelFiles").unpack()
skipped = conn.call_sync(NAME, ROOT, MANAGER, "Reload", None, None, 0, 10000, None).unpack()[0]
ctx = GLib.MainContext.default()
deadline = GLib.get_monotonic_time() + 10000000
while GLib.get_monotonic_time() < deadline:
    cached = proxy.get_cached_property("SkippedModelFiles")
    if cached is not None and cached.unpack() == skipped:
        print("followed %d -> %d" % (len(before), len(skipped)))
        sys.exit(0)
    ctx.iteration(False)
print("stale: cached %s, reload said %s" % (proxy.get_cached_property("SkippedModelFiles"), skipped))
"""#

    func testAGDBusProxysCachedSkippedModelFilesFollowsAReload() async throws {
        try write("ok.json", group: "app", #""x": {"type": "i", "default": 1}"#)
        try await restart(models: ["ok.json"])
        try write("ok.json", "{")
        let result = try await tool("/usr/bin/python3", ["-c", Self.proxyScript, bus.address], timeout: 60)
        XCTAssertTrue(result.succeeded, "\(result)")
        XCTAssertEqual(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "followed 0 -> 1", "\(result)")
    }

    // MARK: Defect 10: only regular files, of a bounded size

    /// Asserts that a reload answers, skips `name` with `problem`, applies the good file (its new
    /// key `app.y`) and that the daemon goes on serving.
    private func assertReloadSkips(_ name: String, saying problem: String, file: StaticString = #filePath, line: UInt = #line) async throws {
        try write("good.json", group: "app", #""x": {"type": "i", "default": 1}, "y": {"type": "i", "default": 2}"#)
        let skipped = try await reload()
        XCTAssertEqual(skipped.map(\.path), [modelURL(name).path], "\(skipped)", file: file, line: line)
        XCTAssertTrue(skipped.first?.reason.contains(problem) ?? false, "\(skipped)", file: file, line: line)
        let y = try await client.get("app.y")
        XCTAssertEqual(y, .int32(2), "the good file applied", file: file, line: line)
        let listed = try await propctlAsNobody(["list"])
        XCTAssertTrue(listed.succeeded && listed.stdout.contains("app.x"), "\(listed)", file: file, line: line)
    }

    func testAFIFONamedLikeAModelFileIsRefusedAndTheReloadAnswers() async throws {
        try write("good.json", group: "app", #""x": {"type": "i", "default": 1}"#)
        try await restart(models: ["good.json", "fifo.json"])
        let fifo = modelURL("fifo.json").path
        XCTAssertEqual(mkfifo(fifo, 0o644), 0)
        // Should a reader block on it, a writer that comes and goes lets it see the end.
        defer {
            let writer = open(fifo, O_WRONLY | O_NONBLOCK)
            if writer >= 0 { close(writer) }
        }
        try await assertReloadSkips("fifo.json", saying: "not a regular file")
    }

    func testASymlinkToDevZeroIsRefusedWithoutReadingIt() async throws {
        try write("good.json", group: "app", #""x": {"type": "i", "default": 1}"#)
        try await restart(models: ["good.json", "zero.json"])
        try FileManager.default.createSymbolicLink(atPath: modelURL("zero.json").path, withDestinationPath: "/dev/zero")
        try await assertReloadSkips("zero.json", saying: "not a regular file")
    }

    func testAModelFileAboveTheSizeLimitIsRefusedBeforeItIsRead() async throws {
        try write("good.json", group: "app", #""x": {"type": "i", "default": 1}"#)
        try await restart(models: ["good.json", "big.json"])
        // 9 MiB of description: above the 8 MiB default.
        try write("big.json", #"{"description": ""# + String(repeating: "d", count: 9 << 20) + #"", "groups": {}}"#)
        try await assertReloadSkips("big.json", saying: "--max-model-file-size")
        // The limit is an option.
        try await restartDaemon(arguments: daemonArguments + ["--max-model-file-size", "16777216", "--model", modelURL("good.json").path,
                                                              "--model", modelURL("big.json").path])
        let skipped = try await reload()
        XCTAssertTrue(skipped.isEmpty, "\(skipped)")
    }

    // MARK: Defect 11: no NUL in a model file's text

    func testANULInAModelFilesTextIsRefusedAndListsStillWorkForEveryone() async throws {
        try write("good.json", group: "app", #""x": {"type": "i", "default": 1}"#)
        let files = [
            "description.json": #"{"groups": {"p": {"properties": {"k": {"type": "i", "description": "x\u0000y"}}}}}"#,
            "writers.json": #"{"groups": {"secure": {"properties": {"knob": {"type": "i", "writers": ["nobody\u0000zzz"]}}}}}"#,
            "command.json": #"{"groups": {"c": {"commands": {"run": {"exec": ["/bin/echo"], "description": "x\u0000y"}}}}}"#,
            "exec.json": #"{"groups": {"e": {"commands": {"run": {"exec": ["/bin/echo", "x\u0000y"]}}}}}"#,
            "when.json": #"{"groups": {"w": {"commands": {"run": {"exec": ["/bin/true"], "enabled_when": "'x\u0000y' == 'x'"}}}}}"#,
            "cwriters.json": #"{"groups": {"cw": {"commands": {"run": {"exec": ["/bin/true"], "writers": ["nobody\u0000zzz"]}}}}}"#,
        ]
        for (name, text) in files { try write(name, text) }
        try await restart(models: ["good.json"] + files.keys.sorted())
        let skipped = try await reload()
        XCTAssertEqual(skipped.map(\.path).sorted(), files.keys.sorted().map { modelURL($0).path }, "\(skipped)")
        for (path, reason) in skipped { XCTAssertTrue(reason.contains("NUL"), "\(path): \(reason)") }
        let written = try await setAsNobody("secure.knob", "5")
        XCTAssertFalse(written.succeeded, "nobody wrote through a writers entry with a NUL: \(written)")
        let properties = try await propctlAsNobody(["list"])
        XCTAssertTrue(properties.succeeded && properties.stdout.contains("app.x"), "\(properties)")
        let commands = try await busctlAsNobody(["call", PropBusAPI.busName, PropBusAPI.rootPath, PropBusAPI.manager, "ListCommands"])
        assertSucceeded(commands)
    }

    // MARK: Defect 12: a reload is all or nothing

    func testAReloadWhoseCommitFailsLeavesNothingOfItselfAndTheNextOneAppliesAll() async throws {
        try write("a.json", group: "app", #""x": {"type": "i", "default": 1}"#)
        try write("b.json", group: "other", #""z": {"type": "s", "default": "old"}"#)
        try await restart(models: ["a.json", "b.json"])
        try write("a.json", group: "app", #""x": {"type": "i", "default": 2}, "y": {"type": "b", "default": true}"#)
        try write("b.json", group: "other", #""z": {"type": "s", "default": "new"}"#)

        // Another process holding the write lock makes the daemon's commit fail. A write
        // answered first means the daemon's start-up commit is done and the lock is free.
        try await client.barrier()
        let blocker = try LockingConnection(path: storePath)
        await assertDBusError(PropBusAPI.error("StoreFailed")) { try await self.reload() }
        let x = try await client.get("app.x")
        XCTAssertEqual(x, .int32(1), "the changed default stays as it was")
        let z = try await client.get("other.z")
        XCTAssertEqual(z, .string("old"), "the other file's change is undone too")
        let keys = try await client.list(prefix: "app.").map(\.key)
        XCTAssertEqual(keys, ["app.x"], "the new key is not served")
        blocker.release()

        let skipped = try await reload()
        XCTAssertTrue(skipped.isEmpty, "\(skipped)")
        let after = (try await client.get("app.x"), try await client.get("app.y"), try await client.get("other.z"))
        XCTAssertEqual(after.0, .int32(2))
        XCTAssertEqual(after.1, .boolean(true))
        XCTAssertEqual(after.2, .string("new"))
        try await restart(models: ["a.json", "b.json"])
        let restarted = try await client.get("app.y")
        XCTAssertEqual(restarted, .boolean(true), "and it is durable")
    }
}

