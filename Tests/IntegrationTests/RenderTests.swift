import DBus
import Foundation
import XCTest

/// Renders (docs/render.md) on the real daemon: a key change reaches the file; a failed check
/// keeps the old bytes, a failed reload puts the previous file back; a required key unset or
/// empty writes nothing; owner and mode are right from the first byte; a kill -9 at any moment
/// never leaves a torn file; one render's failure stops neither the daemon nor the others.
final class RenderTests: DaemonTestCase, @unchecked Sendable {
    private var directory: URL { bus.directory }
    private func path(_ name: String) -> String { directory.appendingPathComponent(name).path }

    /// A model file with `properties` in group `web` and `renders`, and the daemon restarted with it.
    private func start(properties: String, renders: String, extraArguments: [String] = []) async throws {
        try #"{"groups": {"web": {"properties": {\#(properties)}}}, "renders": {\#(renders)}}"#
            .write(toFile: path("model.json"), atomically: true, encoding: .utf8)
        try await restartDaemon(arguments: ["--model", path("model.json")] + extraArguments)
    }

    private func contents(_ name: String) -> String? {
        try? String(contentsOfFile: path(name), encoding: .utf8)
    }

    private func state(_ render: String) async throws -> (state: String, message: String, revision: UInt64) {
        let values = try await client.getAll(group: "render.\(render)")
        guard let state = values["State"]?.stringValue, let message = values["Message"]?.stringValue,
              case .uint64(let revision)? = values["Revision"] else { throw TestSetupError("render.\(render): \(values)") }
        return (state, message, revision)
    }

    /// Waits until the render's state is `expected` (the end of a run: a barrier for what it wrote or not).
    @discardableResult
    private func waitForState(_ render: String, _ expected: String, revision: UInt64 = 0, file: StaticString = #filePath, line: UInt = #line) async throws -> (state: String, message: String, revision: UInt64) {
        var last: (state: String, message: String, revision: UInt64)?
        _ = await eventually(timeout: 15) {
            last = try? await self.state(render)
            return last?.state == expected && (last?.revision ?? 0) >= revision
        }
        XCTAssertEqual(last?.state, expected, "render.\(render): \(String(describing: last)); stderr: \(daemon.stderr)", file: file, line: line)
        return last ?? ("", "", 0)
    }

    private func waitForContents(_ name: String, _ expected: String, file: StaticString = #filePath, line: UInt = #line) async {
        let reached = await eventually(timeout: 15) { self.contents(name) == expected }
        XCTAssertTrue(reached, "\(name) holds \(String(describing: contents(name))), expected \(expected); stderr: \(daemon.stderr)", file: file, line: line)
    }

    func testAKeyChangeReachesTheFile() async throws {
        try await start(properties: #""port": {"type": "i", "default": 8080}"#,
                        renders: #""site": {"template_text": "listen {{ web.port }};\n", "destination": "\#(path("site.conf"))"}"#)
        await waitForContents("site.conf", "listen 8080;\n")
        try await client.set("web.port", .int32(9090))
        let revision = try await client.getWithRevision("web.port").revision
        await waitForContents("site.conf", "listen 9090;\n")
        let state = try await waitForState("site", "ok", revision: revision)
        XCTAssertGreaterThanOrEqual(state.revision, revision, "Revision names the change the file holds")
        XCTAssertTrue(state.message.contains(path("site.conf")), state.message)
    }

    func testAFailedCheckKeepsTheOldBytesAndSetsTheStateUntilTheNextChange() async throws {
        // The check refuses a file holding "bad"; it gets the staged file's path.
        try await start(properties: #""name": {"type": "s", "default": "good"}"#, renders: #"""
            "site": {"template_text": "name {{ web.name }}\n", "destination": "\#(path("site.conf"))",
                     "check": ["sh", "-c", "if grep -q bad \"$1\"; then echo \"refused $1\" >&2; exit 3; fi", "sh", "{{file}}"]}
            """#)
        await waitForContents("site.conf", "name good\n")
        try await client.set("web.name", .string("bad"))
        let failed = try await waitForState("site", "check-failed")
        XCTAssertEqual(contents("site.conf"), "name good\n", "the old file stays")
        XCTAssertTrue(failed.message.contains("exited with status 3") && failed.message.contains("refused \(path(".site.conf.propbus-"))"), failed.message)
        XCTAssertTrue(daemon.stderr.contains("render site: check-failed"), daemon.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.contains(".propbus-") }, [],
                       "the refused staged file is removed")
        // Retried on the next change.
        try await client.set("web.name", .string("better"))
        await waitForContents("site.conf", "name better\n")
        try await waitForState("site", "ok")
        XCTAssertTrue(daemon.process.isRunning)
    }

    func testAFailedReloadPutsThePreviousFileBackAndReloadsAgain() async throws {
        let log = path("reloads.log"), destination = path("site.conf")
        try await start(properties: #""name": {"type": "s", "default": "good"}"#, renders: #"""
            "site": {"template_text": "name {{ web.name }}\n", "destination": "\#(destination)",
                     "reload": ["sh", "-c", "cat \"$1\" >> \#(log); ! grep -q bad \"$1\"", "sh", "{{file}}"]}
            """#)
        await waitForContents("site.conf", "name good\n")
        try await client.set("web.name", .string("bad"))
        let failed = try await waitForState("site", "reload-failed")
        XCTAssertEqual(contents("site.conf"), "name good\n", "the previous file is back")
        XCTAssertTrue(failed.message.contains("previous") && failed.message.contains("reloaded"), failed.message)
        // Reloaded with the first file, with the bad one, and with the first one again.
        XCTAssertEqual(contents("reloads.log"), "name good\nname bad\nname good\n")
    }

    func testARequiredKeyUnsetOrEmptyWritesNothing() async throws {
        try await start(properties: #""upstream": {"type": "s"}, "port": {"type": "i", "default": 80}"#, renders: #"""
            "site": {"template_text": "proxy_pass {{ web.upstream }}:{{ web.port }};\n", "destination": "\#(path("site.conf"))",
                     "require": ["web.upstream", "web.missing.*"]}
            """#)
        let waiting = try await waitForState("site", "waiting-for-keys")
        XCTAssertTrue(waiting.message.contains("web.upstream is empty"), waiting.message)
        XCTAssertNil(contents("site.conf"), "never an empty file")
        try await client.set("web.upstream", .string("10.0.0.1"))
        // The group the render requires has no keys yet.
        let stillWaiting = try await waitForState("site", "waiting-for-keys")
        _ = await eventually { (try? await self.state("site").message.contains("web.missing.* has no keys")) == true }
        XCTAssertNil(contents("site.conf"), "\(stillWaiting)")
        try await client.create("web.missing.a", "s", default: .string("x"))
        await waitForContents("site.conf", "proxy_pass 10.0.0.1:80;\n")
    }

    func testOwnerAndModeAreRightFromTheFirstByte() async throws {
        try XCTSkipUnless(getuid() == 0, "giving a file to nobody needs root")
        let observed = path("observed")
        // The check sees the staged file as it will be installed: owner, group, mode and every byte.
        try await start(properties: #""key": {"type": "s", "default": "one"}"#, renders: #"""
            "site": {"template_text": "key={{ web.key }}\n", "destination": "\#(path("site.conf"))",
                     "owner": "nobody", "group": "65534", "mode": "0640",
                     "check": ["sh", "-c", "stat -c '%u %g %a %s' \"$1\" >> \#(observed)", "sh", "{{file}}"]}
            """#)
        await waitForContents("site.conf", "key=one\n")
        try await client.set("web.key", .string("three"))
        await waitForContents("site.conf", "key=three\n")
        XCTAssertEqual(contents("observed"), "65534 65534 640 8\n65534 65534 640 10\n")
        let attributes = try FileManager.default.attributesOfItem(atPath: path("site.conf"))
        XCTAssertEqual(attributes[.ownerAccountID] as? Int, 65534)
        XCTAssertEqual(attributes[.groupOwnerAccountID] as? Int, 65534)
        XCTAssertEqual(attributes[.posixPermissions] as? Int, 0o640)
    }

    func testAnUnchangedFileIsNeitherRewrittenNorReloaded() async throws {
        let log = path("reloads.log")
        try await start(properties: #""a": {"type": "i", "default": 1}, "b": {"type": "i", "default": 1}"#, renders: #"""
            "site": {"template_text": "{{ web.a > 0 ? \"on\" : \"off\" }}\n", "destination": "\#(path("site.conf"))",
                     "reload": ["sh", "-c", "echo reload >> \#(log)"]}
            """#)
        try await waitForState("site", "ok")
        let inode = try FileManager.default.attributesOfItem(atPath: path("site.conf"))[.systemFileNumber] as? Int
        try await client.set("web.a", .int32(5))
        _ = await eventually { (try? await self.state("site").message.contains("not rewritten")) == true }
        let unchanged = try await state("site")
        XCTAssertTrue(unchanged.message.contains("not rewritten"), unchanged.message)
        XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: path("site.conf"))[.systemFileNumber] as? Int, inode)
        XCTAssertEqual(contents("reloads.log"), "reload\n", "reloaded once, at the first render")
    }

    func testAReloadCutShortByAStopRunsAtTheNextStart() async throws {
        let log = path("reloads.log")
        // As a daemon killed between a rename and its reload leaves things: the new file, and the note.
        try "port 1\n".write(toFile: path("site.conf"), atomically: true, encoding: .utf8)
        chmod(path("site.conf"), 0o644)
        XCTAssertTrue(FileManager.default.createFile(atPath: path(".site.conf.propbus-reload-due"), contents: nil))
        try await start(properties: #""port": {"type": "i", "default": 1}"#, renders: #"""
            "site": {"template_text": "port {{ web.port }}\n", "destination": "\#(path("site.conf"))",
                     "reload": ["sh", "-c", "echo reload >> \#(log)"]}
            """#)
        let state = try await waitForState("site", "ok")
        XCTAssertTrue(state.message.contains("not rewritten; reloaded"), state.message)
        XCTAssertEqual(contents("reloads.log"), "reload\n")
        XCTAssertFalse(FileManager.default.fileExists(atPath: path(".site.conf.propbus-reload-due")))
        // A write reloads and leaves no note behind either.
        try await client.set("web.port", .int32(2))
        await waitForContents("site.conf", "port 2\n")
        _ = await eventually { self.contents("reloads.log") == "reload\nreload\n" }
        XCTAssertEqual(contents("reloads.log"), "reload\nreload\n")
        _ = await eventually { !FileManager.default.fileExists(atPath: self.path(".site.conf.propbus-reload-due")) }
        XCTAssertFalse(FileManager.default.fileExists(atPath: path(".site.conf.propbus-reload-due")))
    }

    func testOneRendersFailureStopsNeitherTheDaemonNorTheOthers() async throws {
        try await start(properties: #""port": {"type": "i", "default": 1}"#, renders: #"""
            "broken": {"template_text": "{{ web.port }}\n", "destination": "\#(path("none/x.conf"))"},
            "refused": {"template_text": "{{ web.port }}\n", "destination": "\#(path("refused.conf"))", "check": ["false"]},
            "slow": {"template_text": "{{ web.port }}\n", "destination": "\#(path("slow.conf"))", "check": ["sleep", "30"], "timeout": 0.5},
            "fine": {"template_text": "port {{ web.port }}\n", "destination": "\#(path("fine.conf"))"}
            """#)
        try await waitForState("broken", "install-failed")
        try await waitForState("refused", "check-failed")
        let slow = try await waitForState("slow", "check-failed")
        XCTAssertTrue(slow.message.contains("did not finish within 0.5 s"), slow.message)
        await waitForContents("fine.conf", "port 1\n")
        try await client.set("web.port", .int32(2))
        await waitForContents("fine.conf", "port 2\n")
        XCTAssertTrue(daemon.process.isRunning)
        XCTAssertNil(contents("refused.conf"))
    }

    /// The daemon ends what finished executions leave behind, and reaps its children: a
    /// render's check running meanwhile is its I/O loop's, neither killed nor reaped by that sweep.
    func testAnExecutionEndingDuringACheckLeavesTheCheckAlone() async throws {
        let started = path("check-started")
        try await start(properties: #""port": {"type": "i", "default": 1}"#, renders: #"""
            "site": {"template_text": "{{ web.port }}\n", "destination": "\#(path("site.conf"))",
                     "check": ["sh", "-c", "touch \#(started); sleep 1; exit 0"]}
            """#)
        try await waitForState("site", "ok")
        try FileManager.default.removeItem(atPath: started)
        try await client.call(PropBusAPI.manager, "CreateCommand", [.string("jobs.quick"), .vardict(["exec": .array(of: .string, [.string("true")])])])
        try await client.set("web.port", .int32(2))
        let revision = try await client.getWithRevision("web.port").revision
        let checking = await eventually { FileManager.default.fileExists(atPath: started) }
        XCTAssertTrue(checking)
        // Ends while the check sleeps: the sweep after it looks at every child of the daemon.
        _ = try await client.call(at: "/org/propbus/PropBus1/jobs/quick", "org.propbus.PropBus1.Command", "Execute", [.variant(.string(""))])
        try await waitForState("site", "ok", revision: revision)
        XCTAssertEqual(contents("site.conf"), "2\n")
    }

    /// docs/render.md's worked example: examples/render/nginx.json and its template, with the
    /// destination moved into the test's directory and `grep` standing in for `nginx -t`, write
    /// the nginx.conf the page shows.
    func testTheNginxExampleRendersAsDocumented() async throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let page = try String(contentsOf: root.appendingPathComponent("docs/render.md"), encoding: .utf8)
        guard let marker = page.range(of: "<!-- render example output -->\n```nginx\n"),
              let end = page.range(of: "```", range: marker.upperBound..<page.endIndex) else { return XCTFail("no example output in docs/render.md") }
        let documented = String(page[marker.upperBound..<end.lowerBound])
        let examples = root.appendingPathComponent("examples/render")
        try FileManager.default.copyItem(at: examples.appendingPathComponent("nginx.conf.tmpl"), to: directory.appendingPathComponent("nginx.conf.tmpl"))
        var model = try JSONSerialization.jsonObject(with: Data(contentsOf: examples.appendingPathComponent("nginx.json"))) as! [String: Any]
        var renders = model["renders"] as! [String: Any], nginx = renders["nginx"] as! [String: Any]
        nginx["destination"] = path("nginx.conf")
        nginx["check"] = ["grep", "-q", "upstream backends", "{{file}}"]
        nginx["reload"] = ["true"]
        renders["nginx"] = nginx
        model["renders"] = renders
        try JSONSerialization.data(withJSONObject: model).write(to: URL(fileURLWithPath: path("nginx.json")))
        try await restartDaemon(arguments: ["--model", path("nginx.json")])
        try await waitForState("nginx", "ok")
        XCTAssertEqual(contents("nginx.conf"), documented)

        // The last upstream gone: nothing is written, nginx keeps its configuration (with both
        // upstreams, or with the second one when the wait rendered between the two deletions).
        try await client.delete("web.backends.app1")
        try await client.delete("web.backends.app2")
        try await waitForState("nginx", "waiting-for-keys")
        let secondOnly = documented.replacingOccurrences(of: "        server 10.0.0.11:8080;  # web.backends.app1\n", with: "")
        XCTAssertTrue([documented, secondOnly].contains(contents("nginx.conf") ?? ""), contents("nginx.conf") ?? "(none)")
    }

    /// The content rendered for value `n`: big enough that writing it takes a while, so a torn
    /// file would be caught mid-write.
    static func version(_ n: Int) -> String { String(repeating: "\(n);", count: 40_000) + "\n" }

    /// Every observed content of the file is one of the versions rendered, whenever the daemon is
    /// killed (SIGKILL, so no clean-up runs): renames are atomic, and a restart finds no torn file.
    func testNoTornFileWhenTheDaemonIsKilledDuringRenders() async throws {
        try await start(properties: #""body": {"type": "s", "default": "0"}"#,
                        renders: #""big": {"template_text": "{{ web.body }}\n", "destination": "\#(path("big.conf"))"}"#)
        await waitForContents("big.conf", "0\n")
        let reader = TornFileReader(path: path("big.conf")) { text in
            guard text != "0\n" else { return true }
            guard let first = text.split(separator: ";").first, let n = Int(first) else { return false }
            return text == Self.version(n)
        }
        reader.start()
        for round in 0..<6 {
            // Writes while the daemon renders; the kill lands somewhere in the middle of them.
            let client = self.client!, first = (round + 1) * 1_000_000
            let writer = Task {
                var n = first
                while !Task.isCancelled {
                    try? await client.set("web.body", .string(String(Self.version(n).dropLast())))
                    n += 1
                }
            }
            try await Task.sleep(nanoseconds: UInt64(150 + 70 * round) * 1_000_000)
            daemon.process.signal(SIGKILL)
            writer.cancel()
            _ = await writer.result
            _ = await daemon.process.waitForExit(timeout: 10)
            try await restartDaemon(arguments: ["--model", path("model.json")])
        }
        try await waitForState("big", "ok")
        reader.stop()
        XCTAssertGreaterThan(reader.reads, 10, "the reader saw the file often")
        XCTAssertGreaterThan(reader.versions, 1, "the reader saw versions rendered during the kills")
        XCTAssertEqual(reader.torn, [], "torn or unknown contents were observed")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.contains(".propbus-") }, [],
                       "the restarted daemon removed what the killed one left")
    }
}

/// Reads a file in a loop on a thread of its own, checking every content it sees.
final class TornFileReader: @unchecked Sendable {
    // Safety: the counters are written by the reader thread and read after stop(), which joins it.
    private let path: String
    private let isValid: @Sendable (String) -> Bool
    private var running = true
    private var thread: Thread?
    private let finished = DispatchSemaphore(value: 0)
    private(set) var reads = 0
    private(set) var torn: [String] = []
    /// How many different contents were seen.
    var versions: Int { seen.count }
    private var seen: Set<Int> = []

    init(path: String, isValid: @escaping @Sendable (String) -> Bool) {
        self.path = path
        self.isValid = isValid
    }

    func start() {
        let thread = Thread { [self] in
            while running {
                if let data = FileManager.default.contents(atPath: path) {
                    reads += 1
                    let text = String(decoding: data, as: UTF8.self)
                    if !isValid(text), torn.count < 3 { torn.append(String(text.prefix(80)) + "… (\(data.count) bytes)") }
                    seen.insert(text.hashValue)
                }
            }
            finished.signal()
        }
        self.thread = thread
        thread.start()
    }

    func stop() {
        running = false
        finished.wait()
    }
}
