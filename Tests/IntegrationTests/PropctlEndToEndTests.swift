import DBus
import Foundation
import XCTest

/// `propctl` as a user runs it: plain values for scalars, JSON for containers, `--json` output,
/// exit codes 0/1/64/69, and `watch`.
final class PropctlEndToEndTests: DaemonTestCase {
    /// `propctl --address <bus> ARGS…`
    private func propctl(_ arguments: [String], timeout: TimeInterval = 10) async throws -> CommandResult {
        try await tool(BuildProducts.propctl, ["--address", bus.address] + arguments, timeout: timeout)
    }

    private func json(_ text: String, file: StaticString = #filePath, line: UInt = #line) -> Any? {
        do {
            return try JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed])
        } catch {
            XCTFail("not JSON (\(error)): \(text)", file: file, line: line)
            return nil
        }
    }

    private func lines(_ text: String) -> [String] {
        text.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
    }

    // MARK: Values

    func testCreateSetGetResetDeleteWithPlainScalars() async throws {
        let create = try await propctl(["create", "ui.switch.on", "b", "--default", "false", "--description", "Power"])
        XCTAssertEqual(create.status, 0, "\(create)")
        let initial = try await propctl(["get", "ui.switch.on"])
        XCTAssertEqual(initial.stdout, "false\n")
        let set = try await propctl(["set", "ui.switch.on", "true"])
        XCTAssertEqual(set.status, 0, "\(set)")
        let value = try await client.get("ui.switch.on")
        XCTAssertEqual(value, .boolean(true))
        let reset = try await propctl(["reset", "ui.switch.on"])
        XCTAssertEqual(reset.status, 0, "\(reset)")
        let afterReset = try await propctl(["get", "ui.switch.on"])
        XCTAssertEqual(afterReset.stdout, "false\n")
        let delete = try await propctl(["delete", "ui.switch.on"])
        XCTAssertEqual(delete.status, 0, "\(delete)")
        let keys = try await client.list().map(\.key)
        XCTAssertEqual(keys, [])
    }

    func testScalarsOfEveryKindAreParsedByTheKeyType() async throws {
        let cases: [(type: String, text: String, value: DBusValue)] = [
            ("y", "200", .byte(200)), ("n", "-5", .int16(-5)), ("q", "65535", .uint16(65535)), ("i", "-42", .int32(-42)),
            ("u", "42", .uint32(42)), ("x", "-9000000000", .int64(-9_000_000_000)), ("t", "18000000000000000000", .uint64(18_000_000_000_000_000_000)),
            ("d", "3.5", .double(3.5)), ("s", "hello world", .string("hello world")), ("o", "/a/b", .objectPath("/a/b")), ("g", "a{sv}", .signature("a{sv}")),
        ]
        for (index, item) in cases.enumerated() {
            let key = "kinds.k\(index)"
            try await client.create(key, item.type, default: item.value == .string("hello world") ? .string("") : item.value)
            let set = try await propctl(["set", key, "--", item.text])
            XCTAssertEqual(set.status, 0, "type \(item.type): \(set)")
            let value = try await client.get(key)
            XCTAssertEqual(value, item.value, "type \(item.type)")
            let printed = try await propctl(["get", key])
            XCTAssertEqual(printed.stdout, item.text + "\n", "type \(item.type)")
        }
    }

    func testContainersAreSetAndPrintedAsJSON() async throws {
        try await client.create("settings.tags", "as", default: .array(of: .string, []))
        try await client.create("settings.limits", "a{si}", default: .dictionary(key: .string, value: .int32, []))
        try await client.create("settings.extra", "a{sv}", default: .vardict([:]))
        let tags = try await propctl(["set", "settings.tags", #"["a","b"]"#])
        XCTAssertEqual(tags.status, 0, "\(tags)")
        let tagsValue = try await client.get("settings.tags")
        XCTAssertEqual(tagsValue, .array(of: .string, [.string("a"), .string("b")]))
        let limits = try await propctl(["set", "settings.limits", #"{"k": 1}"#])
        XCTAssertEqual(limits.status, 0, "\(limits)")
        let limitsValue = try await client.get("settings.limits")
        XCTAssertEqual(limitsValue, .dictionary(key: .string, value: .int32, [DictionaryEntry(.string("k"), .int32(1))]))
        let extra = try await propctl(["set", "settings.extra", #"{"on": true, "name": "x"}"#])
        XCTAssertEqual(extra.status, 0, "\(extra)")
        let extraValue = try await client.get("settings.extra")
        XCTAssertEqual(extraValue.stringKeyedEntries?.mapValues(\.unwrappingVariantOnce), ["on": .boolean(true), "name": .string("x")])
        let printed = try await propctl(["get", "settings.tags", "settings.limits"])
        XCTAssertEqual(lines(printed.stdout).count, 2, "\(printed)")
        XCTAssertEqual(json(lines(printed.stdout).first ?? "") as? [String], ["a", "b"])
        XCTAssertEqual(json(lines(printed.stdout).last ?? "") as? [String: Int], ["k": 1])
    }

    func testCreateOptionsReachTheDaemon() async throws {
        let create = try await propctl(["create", "audio.volume", "i", "--default", "5", "--minimum", "0", "--maximum", "10",
                                        "--description", "Loudness"])
        XCTAssertEqual(create.status, 0, "\(create)")
        let readOnly = try await propctl(["create", "sys.version", "s", "--default", "1.0", "--read-only"])
        XCTAssertEqual(readOnly.status, 0, "\(readOnly)")
        let choices = try await propctl(["create", "ui.theme", "s", "--default", "light", "--choice", "light", "--choice", "dark"])
        XCTAssertEqual(choices.status, 0, "\(choices)")
        let listed = Dictionary(uniqueKeysWithValues: try await client.list().map { ($0.key, $0) })
        XCTAssertEqual(listed["audio.volume"]?.metadata["description"], .string("Loudness"))
        XCTAssertEqual(listed["audio.volume"]?.metadata["maximum"], .int32(10))
        XCTAssertEqual(listed["sys.version"]?.metadata["writable"], .boolean(false))
        let rejected = try await propctl(["set", "ui.theme", "purple"])
        XCTAssertEqual(rejected.status, 1, "\(rejected)")
        XCTAssertTrue(rejected.stderr.contains(PropBusAPI.error("InvalidValue")), rejected.stderr)
    }

    func testListPrintsKeyTypeAndValue() async throws {
        try await client.create("settings.volume", "i", default: .int32(5))
        try await client.create("settings.tags", "as", default: .array(of: .string, [.string("a")]))
        try await client.create("ui.switch.on", "b", default: .boolean(true))
        let all = try await propctl(["list"])
        XCTAssertEqual(all.status, 0, "\(all)")
        let rows = lines(all.stdout).map { $0.split(whereSeparator: { $0 == "\t" || $0 == " " }).map(String.init) }
        XCTAssertEqual(rows.map { $0.first ?? "" }, ["settings.tags", "settings.volume", "ui.switch.on"], all.stdout)
        XCTAssertEqual(rows.last, ["ui.switch.on", "b", "true"], all.stdout)
        let settings = try await propctl(["list", "settings"])
        XCTAssertEqual(lines(settings.stdout).count, 2, settings.stdout)
    }

    // MARK: --json

    func testJSONOutputParsesForEverySubcommand() async throws {
        let create = try await propctl(["--json", "create", "settings.tags", "as", "--default", #"["a"]"#])
        XCTAssertEqual(create.status, 0, "\(create)")
        if !create.stdout.isEmpty { _ = json(create.stdout) }
        let set = try await propctl(["--json", "set", "settings.tags", #"["x","y"]"#])
        XCTAssertEqual(set.status, 0, "\(set)")
        if !set.stdout.isEmpty { _ = json(set.stdout) }
        let get = try await propctl(["--json", "get", "settings.tags"])
        let got = json(get.stdout) as? [String: Any]
        XCTAssertEqual(got?["settings.tags"] as? [String], ["x", "y"], get.stdout)
        let list = try await propctl(["--json", "list"])
        let rows = json(list.stdout) as? [[String: Any]]
        XCTAssertEqual(rows?.count, 1, list.stdout)
        XCTAssertEqual(rows?.first?["key"] as? String, "settings.tags")
        XCTAssertEqual(rows?.first?["type"] as? String, "as")
        XCTAssertEqual(rows?.first?["value"] as? [String], ["x", "y"])
        XCTAssertEqual(rows?.first?["default"] as? [String], ["a"])
        let status = try await propctl(["--json", "status"])
        let state = json(status.stdout) as? [String: Any]
        XCTAssertEqual(state?["running"] as? Bool, true, status.stdout)
        let reset = try await propctl(["--json", "reset", "settings.tags"])
        XCTAssertEqual(reset.status, 0, "\(reset)")
        if !reset.stdout.isEmpty { _ = json(reset.stdout) }
        let delete = try await propctl(["--json", "delete", "settings.tags"])
        XCTAssertEqual(delete.status, 0, "\(delete)")
        if !delete.stdout.isEmpty { _ = json(delete.stdout) }
    }

    // MARK: Exit codes

    func testDaemonErrorsExitOneWithTheErrorNameAndMessage() async throws {
        try await client.create("audio.volume", "i", default: .int32(5), options: ["maximum": .int32(10)])
        let result = try await propctl(["set", "audio.volume", "11"])
        XCTAssertEqual(result.status, 1, "\(result)")
        XCTAssertTrue(result.stderr.contains(PropBusAPI.error("OutOfRange")), result.stderr)
        XCTAssertTrue(result.stderr.contains("audio.volume"), result.stderr)
        let mismatch = try await propctl(["create", "audio.volume", "s"])
        XCTAssertEqual(mismatch.status, 1, "\(mismatch)")
        XCTAssertTrue(mismatch.stderr.contains(PropBusAPI.error("TypeMismatch")), mismatch.stderr)
    }

    func testUnknownKeyErrorNamesTheKey() async throws {
        let result = try await propctl(["get", "no.such"])
        XCTAssertEqual(result.status, 1, "\(result)")
        XCTAssertTrue(result.stderr.contains("no.such"), "the error should name the key: \(result.stderr)")
    }

    func testUsageErrorsExit64() async throws {
        try await client.create("ui.switch.on", "b", default: .boolean(false))
        // A bad VALUE is not among them: it exits 1, like a value the daemon refuses.
        for arguments in [["bogus"], ["get"], ["set", "ui.switch.on"], ["list", "--no-such-flag"]] {
            let result = try await propctl(arguments)
            XCTAssertEqual(result.status, 64, "\(result)")
            XCTAssertFalse(result.stderr.isEmpty, "\(result)")
        }
        let both = try await tool(BuildProducts.propctl, ["--system", "--address", bus.address, "status"])
        XCTAssertEqual(both.status, 64, "\(both)")
    }

    func testNoDaemonOnTheBusExits69() async throws {
        await daemon.stop()
        _ = await eventually { !((try? await self.client.nameHasOwner()) ?? true) }
        let get = try await propctl(["get", "ui.switch.on"])
        XCTAssertEqual(get.status, 69, "\(get)")
        let status = try await propctl(["status"])
        XCTAssertEqual(status.status, 69, "\(status)")
        let jsonStatus = try await propctl(["--json", "status"])
        XCTAssertEqual(jsonStatus.status, 69, "\(jsonStatus)")
        XCTAssertEqual((json(jsonStatus.stdout) as? [String: Any])?["running"] as? Bool, false)
    }

    func testUnreachableBusExits69() async throws {
        let result = try await tool(BuildProducts.propctl, ["--address", "unix:path=\(bus.directory.path)/nothing", "get", "a.b"])
        XCTAssertEqual(result.status, 69, "\(result)")
    }

    func testSessionBusFromTheEnvironmentIsTheDefault() async throws {
        try await client.create("ui.switch.on", "b", default: .boolean(true))
        // No --address: DBUS_SESSION_BUS_ADDRESS points at the private bus.
        let result = try await tool(BuildProducts.propctl, ["get", "ui.switch.on"])
        XCTAssertEqual(result.stdout, "true\n", "\(result)")
    }

    // MARK: watch

    /// `watch GROUP` follows the group as it grows and shrinks: a key created in a new subgroup
    /// is printed, and a deleted key is reported as deleted (a line, and in --json an object).
    func testWatchOfAGroupSeesNewSubgroupsAndDeletions() async throws {
        try await client.create("settings.a", "i", default: .int32(1))
        try await client.create("settings.marker", "i", default: .int32(0))
        for json in [false, true] {
            let watch = try ChildProcess(BuildProducts.propctl, ["--address", bus.address] + (json ? ["--json"] : []) + ["watch", "settings"],
                                         environment: bus.environment)
            defer { watch.signal(SIGKILL) }
            let listening = await eventually(timeout: 10) { self.lines(watch.stdout).count >= 2 || !watch.isRunning }
            XCTAssertTrue(listening && watch.isRunning, "watch printed nothing: \(watch.stderr)")
            let sub = json ? "settings.json.sub.key" : "settings.sub.key"
            try await client.create(sub, "s", default: .string("new"))
            try await client.delete("settings.a")
            // A barrier: the marker's line comes after whatever the two changes printed.
            try await client.set("settings.marker", .int32(json ? 2 : 1))
            _ = await eventually(timeout: 10) { self.lines(watch.stdout).contains { $0.contains("marker") && $0.contains(json ? "2" : " 1") } }
            let printed = Array(lines(watch.stdout).dropFirst(json ? 3 : 2))
            if json {
                XCTAssertEqual(printed, [#"{"key":"settings.json.sub.key","value":"new"}"#, #"{"key":"settings.a","deleted":true}"#,
                                         #"{"key":"settings.marker","value":2}"#], "\(watch.stdout)")
                try await client.create("settings.a", "i", default: .int32(1))
            } else {
                XCTAssertEqual(printed, ["settings.sub.key new", "settings.a (deleted)", "settings.marker 1"], "\(watch.stdout)")
                try await client.create("settings.a", "i", default: .int32(1))
            }
        }
    }

    func testWatchOfAKeyPrintsItsValueThenOneLinePerChange() async throws {
        try await client.create("ui.switch.on", "b", default: .boolean(false))
        let watch = try ChildProcess(BuildProducts.propctl, ["--address", bus.address, "watch", "ui.switch.on"], environment: bus.environment)
        defer { watch.signal(SIGKILL) }
        // watch subscribes before it reads the initial value, so its first line means it listens.
        let listening = await eventually(timeout: 10) { !self.lines(watch.stdout).isEmpty || !watch.isRunning }
        XCTAssertTrue(listening && watch.isRunning, "watch printed nothing: \(watch.stderr)")
        XCTAssertEqual(lines(watch.stdout), ["ui.switch.on false"])
        try await client.set("ui.switch.on", .boolean(true))
        try await client.set("ui.switch.on", .boolean(true))
        try await client.set("ui.switch.on", .boolean(false))
        // Lines arrive in signal order: a line for the same-value Set would come before the last one.
        _ = await eventually(timeout: 10) { self.lines(watch.stdout).count >= 3 }
        XCTAssertEqual(lines(watch.stdout), ["ui.switch.on false", "ui.switch.on true", "ui.switch.on false"])
        watch.signal(SIGINT)
        let ended = await watch.waitForExit(timeout: 10)
        XCTAssertNotNil(ended, "watch ignored SIGINT")
    }

    func testWatchOfAGroupPrintsChangesOfEveryKeyInIt() async throws {
        try await client.create("ui.switch.on", "b", default: .boolean(false))
        try await client.create("ui.switch.label", "s", default: .string(""))
        try await client.create("other.key", "i", default: .int32(0))
        let watch = try ChildProcess(BuildProducts.propctl, ["--address", bus.address, "watch", "ui.switch"], environment: bus.environment)
        defer { watch.signal(SIGKILL) }
        // Toggle until a line shows that watch has subscribed.
        var toggle = false
        let listening = await eventually(timeout: 10) {
            toggle.toggle()
            try? await self.client.set("ui.switch.on", .boolean(toggle))
            try? await Task.sleep(nanoseconds: 20_000_000)
            return self.lines(watch.stdout).contains { $0.hasPrefix("ui.switch.on ") } || !watch.isRunning
        }
        XCTAssertTrue(listening && watch.isRunning, "watch never printed: \(watch.stderr)")
        try await client.set("other.key", .int32(5))
        try await client.set("ui.switch.label", .string("hello world"))
        // other.key changed first: had watch printed it, its line would precede the label's.
        _ = await eventually(timeout: 10) { self.lines(watch.stdout).contains("ui.switch.label hello world") }
        let printed = lines(watch.stdout)
        XCTAssertTrue(printed.contains("ui.switch.label hello world"), watch.stdout)
        XCTAssertFalse(printed.contains { $0.hasPrefix("other.key") }, "other.key is not in the group: \(watch.stdout)")
        XCTAssertTrue(printed.allSatisfy { $0.hasPrefix("ui.switch.") }, watch.stdout)
    }

    func testWatchJSONPrintsOneObjectPerChange() async throws {
        try await client.create("settings.tags", "as", default: .array(of: .string, []))
        let watch = try ChildProcess(BuildProducts.propctl, ["--address", bus.address, "--json", "watch", "settings.tags"], environment: bus.environment)
        defer { watch.signal(SIGKILL) }
        _ = await eventually(timeout: 10) { !self.lines(watch.stdout).isEmpty || !watch.isRunning }
        try await client.set("settings.tags", .array(of: .string, [.string("a"), .string("b")]))
        _ = await eventually(timeout: 10) { self.lines(watch.stdout).count >= 2 }
        let objects = lines(watch.stdout).compactMap { json($0) as? [String: Any] }
        XCTAssertEqual(objects.count, 2, watch.stdout)
        XCTAssertEqual(objects.last?["key"] as? String, "settings.tags")
        XCTAssertEqual(objects.last?["value"] as? [String], ["a", "b"])
    }

    func testWatchTimestampsAreUTCWithMillisecondsInBothFormats() async throws {
        try await client.create("ui.switch.on", "b", default: .boolean(false))
        // The format Foundation's ISO8601FormatStyle printed before propctl dropped Foundation;
        // a time zone other than UTC must not change it.
        let stamp = try NSRegularExpression(pattern: #"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$"#)
        func isStamp(_ text: String) -> Bool {
            stamp.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil
        }
        var environment = bus.environment
        environment["TZ"] = "Asia/Tokyo"
        let before = Date()
        let plain = try ChildProcess(BuildProducts.propctl, ["--address", bus.address, "watch", "--timestamps", "ui.switch.on"], environment: environment)
        defer { plain.signal(SIGKILL) }
        let json = try ChildProcess(BuildProducts.propctl, ["--address", bus.address, "--json", "watch", "--timestamps", "ui.switch.on"], environment: environment)
        defer { json.signal(SIGKILL) }
        _ = await eventually(timeout: 10) { (!self.lines(plain.stdout).isEmpty || !plain.isRunning) && (!self.lines(json.stdout).isEmpty || !json.isRunning) }
        try await client.set("ui.switch.on", .boolean(true))
        _ = await eventually(timeout: 10) { self.lines(plain.stdout).count >= 2 && self.lines(json.stdout).count >= 2 }
        let after = Date()
        let plainLines = lines(plain.stdout)
        XCTAssertEqual(plainLines.count, 2, "\(plain.stdout)\n\(plain.stderr)")
        for (line, value) in zip(plainLines, ["false", "true"]) {
            let fields = line.split(separator: " ").map(String.init)
            XCTAssertEqual(fields.count, 3, line)
            XCTAssertTrue(isStamp(fields.first ?? ""), line)
            XCTAssertEqual(Array(fields.dropFirst()), ["ui.switch.on", value], line)
        }
        let objects = lines(json.stdout).compactMap { self.json($0) as? [String: Any] }
        XCTAssertEqual(objects.count, 2, json.stdout)
        for object in objects {
            let time = object["time"] as? String ?? ""
            XCTAssertTrue(isStamp(time), "\(object)")
            // The stamp is the wall-clock time in UTC, to the millisecond.
            let parsed = try XCTUnwrap(try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(time), time)
            XCTAssertGreaterThanOrEqual(parsed.timeIntervalSince1970, before.timeIntervalSince1970.rounded(.down) - 0.001, time)
            XCTAssertLessThanOrEqual(parsed.timeIntervalSince1970, after.timeIntervalSince1970 + 0.001, time)
        }
    }

    func testPropctlAndBusctlSeeTheSameValues() async throws {
        let create = try await propctl(["create", "settings.theme", "s", "--default", "light"])
        XCTAssertEqual(create.status, 0, "\(create)")
        let set = try await propctl(["set", "settings.theme", "dark"])
        XCTAssertEqual(set.status, 0, "\(set)")
        let busctl = try await busctl(["get-property", PropBusAPI.busName, PropBusAPI.rootPath + "/settings", PropBusAPI.values, "theme"])
        XCTAssertEqual(busctl.stdout, "s \"dark\"\n", "\(busctl)")
        _ = try await self.busctl(["set-property", PropBusAPI.busName, PropBusAPI.rootPath + "/settings", PropBusAPI.values, "theme", "s", "blue"])
        let get = try await propctl(["get", "settings.theme"])
        XCTAssertEqual(get.stdout, "blue\n")
    }
}

/// What propctl answers before it looks for a bus: the same process, and no daemon to start.
final class PropctlWithoutADaemonTests: XCTestCase {
    /// `propctl ARGS…` with no bus in its environment.
    private func propctlWithoutABus(_ arguments: [String]) async throws -> CommandResult {
        try await runCommand(BuildProducts.propctl, arguments, environment: PrivateBus.isolatedEnvironment(address: nil))
    }

    func testInvalidKeyIsRefusedBeforeReachingTheDaemonQuotingTheRule() async throws {
        // propctl checks keys itself, so a bad key is a usage error.
        let invalid = try await propctlWithoutABus(["create", "nodot", "b"])
        XCTAssertEqual(invalid.status, 64, "\(invalid)")
        XCTAssertTrue(invalid.stderr.contains("nodot") && invalid.stderr.contains("[A-Za-z0-9_]+"), invalid.stderr)
    }

    func testHelpOfEverySubcommandExitsZero() async throws {
        for subcommand in ["get", "set", "reset", "list", "watch", "create", "delete", "status"] {
            let result = try await propctlWithoutABus([subcommand, "--help"])
            XCTAssertEqual(result.status, 0, "\(result)")
            XCTAssertTrue(result.stdout.contains("propctl \(subcommand)"), result.stdout)
        }
    }
}
