import DBus
import Foundation
import XCTest

/// The administration verbs and their rules, as a user runs them: commands managed from propctl,
/// `describe`, `reset --recursive`, the modified marker, one prefix rule, escaped text output,
/// one unknown-key wording, exit 1 for bad values, and the messages when no daemon runs.
final class PropctlVerbTests: DaemonTestCase {
    private func propctl(_ arguments: [String], stdin: String? = nil, timeout: TimeInterval = 10) async throws -> CommandResult {
        try await runCommand(BuildProducts.propctl, ["--address", bus.address] + arguments, environment: bus.environment,
                             stdin: stdin, timeout: timeout)
    }

    private func spawn(_ arguments: [String]) throws -> ChildProcess {
        try ChildProcess(BuildProducts.propctl, ["--address", bus.address] + arguments, environment: bus.environment)
    }

    private func lines(_ text: String) -> [String] {
        text.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
    }

    private func json(_ text: String) -> Any? {
        try? JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed])
    }

    // MARK: Commands from propctl

    func testCreateCommandExecDeleteCommand() async throws {
        let create = try await propctl(["create-command", "jobs.upper", "--description", "Upper-case", "--", "tr", "a-z", "A-Z"])
        XCTAssertEqual(create.status, 0, "\(create)")
        let run = try await propctl(["exec", "jobs.upper", "hello"])
        XCTAssertEqual(run.stdout, "HELLO\n", "\(run)")
        XCTAssertTrue(run.stderr.contains("execution 1 of jobs.upper started"), "exec prints the id on stderr: \(run.stderr)")
        let delete = try await propctl(["delete-command", "jobs.upper"])
        XCTAssertEqual(delete.status, 0, "\(delete)")
        let gone = try await propctl(["exec", "jobs.upper"])
        XCTAssertEqual(gone.status, 1, "\(gone)")
        let again = try await propctl(["delete-command", "jobs.upper"])
        XCTAssertEqual(again.status, 1, "\(again)")
        XCTAssertTrue(again.stderr.contains("UnknownKey: no command named jobs.upper"), again.stderr)
    }

    func testCreateCommandOptionsReachTheDaemon() async throws {
        try await client.create("search.text", "s", default: .string(""))
        let create = try await propctl(["create-command", "search.run", "--concurrent", "--enabled-when", "length(search.text) > 3",
                                        "--timeout", "30", "--writers", "root,@propbus", "--", "sh", "-c", "echo found"])
        XCTAssertEqual(create.status, 0, "\(create)")
        let handler = try await propctl(["create-command", "jobs.build", "--handler"])
        XCTAssertEqual(handler.status, 0, "\(handler)")
        let status = try await propctl(["--json", "status"])
        let commands = ((json(status.stdout) as? [String: Any])?["commands"] as? [[String: Any]]) ?? []
        let run = commands.first { $0["key"] as? String == "search.run" }
        XCTAssertEqual(run?["exec"] as? [String], ["sh", "-c", "echo found"], status.stdout)
        XCTAssertEqual(run?["concurrent"] as? Bool, true)
        XCTAssertEqual(run?["enabled_when"] as? String, "length(search.text) > 3")
        XCTAssertEqual(run?["timeout"] as? Double, 30)
        XCTAssertEqual(run?["writers"] as? [String], ["root", "@propbus"])
        XCTAssertEqual(run?["enabled"] as? Bool, false, "the predicate is false")
        XCTAssertEqual(commands.first { $0["key"] as? String == "jobs.build" }?["handler"] as? Bool, true)
        let both = try await propctl(["create-command", "jobs.x", "--handler", "--", "true"])
        XCTAssertEqual(both.status, 64, "\(both)")
        let neither = try await propctl(["create-command", "jobs.x"])
        XCTAssertEqual(neither.status, 64, "\(neither)")
    }

    func testExecPrintsItsIdAndSIGINTCancelsTheExecution() async throws {
        try await client.createCommand("jobs.sleep", ["exec": .array(of: .string, [.string("sleep"), .string("60")])])
        let exec = try spawn(["exec", "jobs.sleep"])
        defer { exec.signal(SIGKILL) }
        let started = await eventually(timeout: 10) { exec.stderr.contains("execution 1 of jobs.sleep started") }
        XCTAssertTrue(started, "no id on stderr: \(exec.stderr)")
        // status lists the running execution with its id and caller.
        let status = try await propctl(["status"])
        XCTAssertTrue(lines(status.stdout).contains { $0.hasPrefix("1\tjobs.sleep\t:") }, status.stdout)
        exec.signal(SIGINT)
        let ended = await exec.waitForExit(timeout: 10)
        XCTAssertEqual(ended, .exited(130), "\(exec.stderr)")
        XCTAssertTrue(exec.stderr.contains("Cancelled"), exec.stderr)
        // The execution ended, so the serial command is enabled again.
        let executing = try await client.commandProperty("jobs.sleep", "Executing")
        XCTAssertEqual(executing, .boolean(false))
        let enabled = try await client.commandProperty("jobs.sleep", "Enabled")
        XCTAssertEqual(enabled, .boolean(true))
    }

    func testSIGTERMCancelsTheExecutionToo() async throws {
        try await client.createCommand("jobs.sleep", ["exec": .array(of: .string, [.string("sleep"), .string("60")])])
        let exec = try spawn(["exec", "jobs.sleep"])
        defer { exec.signal(SIGKILL) }
        _ = await eventually(timeout: 10) { exec.stderr.contains("started") }
        exec.signal(SIGTERM)
        let ended = await exec.waitForExit(timeout: 10)
        XCTAssertEqual(ended, .exited(143), "\(exec.stderr)")
        let executing = try await client.commandProperty("jobs.sleep", "Executing")
        XCTAssertEqual(executing, .boolean(false))
    }

    func testExecEndsWith69WhenTheDaemonDiesDuringTheExecution() async throws {
        try await client.createCommand("jobs.sleep", ["exec": .array(of: .string, [.string("sleep"), .string("3")])])
        let exec = try spawn(["exec", "jobs.sleep"])
        defer { exec.signal(SIGKILL) }
        _ = await eventually(timeout: 10) { exec.stderr.contains("started") }
        daemon.process.signal(SIGKILL)
        let ended = await exec.waitForExit(timeout: 10)
        XCTAssertEqual(ended, .exited(69), "\(exec.stderr)")
        XCTAssertTrue(exec.stderr.contains("propbusd left the bus while execution 1 of jobs.sleep ran"), exec.stderr)
        await daemon.stop()
        daemon = nil
    }

    func testCancelOneExecutionOrAllOfACommand() async throws {
        try await client.createCommand("jobs.sleep", ["exec": .array(of: .string, [.string("sleep"), .string("60")]), "concurrent": .boolean(true)])
        let first = try await client.start("jobs.sleep")
        let second = try await client.start("jobs.sleep")
        let third = try await client.start("jobs.sleep")
        let recorder = try await client.recordExecutions(of: "jobs.sleep")
        let one = try await propctl(["cancel", "jobs.sleep", String(first)])
        XCTAssertEqual(one.status, 0, "\(one)")
        // A cancelled execution is listed until its program has ended (SIGTERM, then SIGKILL).
        let cancelled = await recorder.wait(timeout: 10) { $0.contains { $0.member == "Failed" && $0.arguments[0] == .uint64(first) } }
        XCTAssertTrue(cancelled.contains { $0.member == "Failed" }, "\(cancelled)")
        let listed = try await client.call(PropBusAPI.manager, "ListExecutions")
        guard case .array(_, let items)? = listed.first else { return XCTFail("ListExecutions gave \(listed)") }
        let ids = items.compactMap { item -> UInt64? in
            guard case .structure(let fields) = item, case .uint64(let id) = fields[0] else { return nil }
            return id
        }
        XCTAssertEqual(ids, [second, third])
        let all = try await propctl(["cancel", "jobs.sleep"])
        XCTAssertEqual(all.status, 0, "\(all)")
        let failed = await recorder.wait(timeout: 10) { $0.filter { $0.member == "Failed" }.count >= 3 }
        XCTAssertEqual(Set(failed.filter { $0.member == "Failed" }.map { $0.arguments[0] }), [.uint64(first), .uint64(second), .uint64(third)])
        let none = try await propctl(["cancel", "jobs.sleep"])
        XCTAssertEqual(none.status, 0, "nothing running is not an error: \(none)")
        let typo = try await propctl(["cancel", "jobs.slep"])
        XCTAssertEqual(typo.status, 1)
        XCTAssertTrue(typo.stderr.contains("did you mean 'jobs.sleep'?"), typo.stderr)
    }

    // MARK: describe, reset --recursive, modified marker

    func testDescribeShowsTypeDefaultRangeChoicesWritersAndMore() async throws {
        try await client.create("settings.volume", "i", default: .int32(50),
                                options: ["minimum": .int32(0), "maximum": .int32(100), "description": .string("Output volume"),
                                          "writers": .array(of: .string, [.string("@audio")])])
        try await client.create("ui.theme", "s", default: .string("light"),
                                options: ["choices": .array(of: .variant, [.variant(.string("light")), .variant(.string("dark"))]),
                                          "persistent": .boolean(false)])
        try await client.set("settings.volume", .int32(70))
        let volume = try await propctl(["describe", "settings.volume"])
        XCTAssertEqual(volume.status, 0, "\(volume)")
        let rows = Dictionary(lines(volume.stdout).map { line -> (String, String) in
            let parts = line.split(separator: " ", maxSplits: 1).map(String.init)
            return (parts[0], parts.count > 1 ? parts[1].trimmingCharacters(in: .whitespaces) : "")
        }, uniquingKeysWith: { a, _ in a })
        XCTAssertEqual(rows["type"], "int32 (i)", volume.stdout)
        XCTAssertEqual(rows["value"], "70")
        XCTAssertEqual(rows["is_set"], "yes")
        XCTAssertEqual(rows["default"], "50")
        XCTAssertEqual(rows["range"], "0 to 100")
        XCTAssertEqual(rows["writers"], "@audio")
        XCTAssertEqual(rows["writable"], "yes")
        XCTAssertEqual(rows["secret"], "no")
        XCTAssertEqual(rows["persistent"], "yes")
        XCTAssertEqual(rows["description"], "Output volume")
        let theme = try await propctl(["describe", "ui.theme"])
        XCTAssertTrue(theme.stdout.contains("choices      light, dark"), theme.stdout)
        XCTAssertTrue(theme.stdout.contains("is_set       no (reads the default)"), theme.stdout)
        XCTAssertTrue(theme.stdout.contains("persistent   no"), theme.stdout)
        try await client.create("settings.gain", "d", default: .double(0), options: ["maximum": .double(6)])
        let gain = try await propctl(["describe", "settings.gain"])
        XCTAssertTrue(gain.stdout.contains("range        at most 6"), gain.stdout)
        let asJSON = try await propctl(["--json", "describe", "settings.volume"])
        XCTAssertEqual((json(asJSON.stdout) as? [String: Any])?["maximum"] as? Int, 100, asJSON.stdout)
    }

    func testResetRecursiveResetsTheGroupAndItsSubgroupsOnlyInOneStep() async throws {
        for key in ["view.a", "view.sub.b", "viewmodel.c"] {
            try await client.create(key, "i", default: .int32(0))
            try await client.set(key, .int32(7))
        }
        let reset = try await propctl(["reset", "--recursive", "view"])
        XCTAssertEqual(reset.status, 0, "\(reset)")
        let a = try await client.get("view.a"), b = try await client.get("view.sub.b"), c = try await client.get("viewmodel.c")
        XCTAssertEqual([a, b, c], [.int32(0), .int32(0), .int32(7)], "view never matches viewmodel")
        let everything = try await propctl(["reset", "--recursive", ""])
        XCTAssertEqual(everything.status, 64, "\(everything)")
    }

    func testAMistypedGroupIsAnErrorThatSuggestsTheNearestOne() async throws {
        try await client.create("settings.volume", "i", default: .int32(5))
        try await client.create("settings.audio.balance", "i", default: .int32(0))
        for verb in [["list"], ["dump"], ["reset", "--recursive"]] {
            let result = try await propctl(verb + ["setings"])
            XCTAssertEqual(result.status, 1, "\(verb): \(result)")
            XCTAssertTrue(result.stderr.contains("UnknownKey"), "\(verb): \(result)")
            XCTAssertTrue(result.stderr.contains("no key or group named setings"), "\(verb): \(result)")
            XCTAssertTrue(result.stderr.contains("did you mean 'settings'?"), "\(verb): \(result)")
            XCTAssertEqual(result.stdout, "", "\(verb): \(result)")
        }
        let subgroup = try await propctl(["list", "settings.audoi"])
        XCTAssertTrue(subgroup.stderr.contains("did you mean 'settings.audio'?"), "\(subgroup)")
        // watch may wait for a group to appear, but says so.
        let watch = try spawn(["watch", "setings"])
        defer { watch.signal(SIGKILL) }
        let warned = await eventually(timeout: 10) { watch.stderr.contains("no key or group named setings yet; waiting for it to appear; did you mean 'settings'?") }
        XCTAssertTrue(warned, "watch said: \(watch.stderr)")
        let known = try await propctl(["list", "settings.audio"])
        XCTAssertEqual(known.status, 0, "\(known)")
        XCTAssertTrue(known.stdout.contains("settings.audio.balance"), "\(known)")
    }

    func testDescribePrintsOneFieldForScripts() async throws {
        try await client.create("settings.volume", "i", default: .int32(50),
                                options: ["minimum": .int32(0), "maximum": .int32(100), "writable": .boolean(false)])
        for (field, expected) in [("range", "0 100"), ("writable", "false"), ("default", "50"), ("type", "i"), ("value", "50"), ("is_set", "false")] {
            let result = try await propctl(["describe", "settings.volume", "--field", field])
            XCTAssertEqual(result.status, 0, "\(field): \(result)")
            XCTAssertEqual(result.stdout, expected + "\n", "\(field): \(result)")
        }
        let unknown = try await propctl(["describe", "settings.volume", "--field", "colour"])
        XCTAssertEqual(unknown.status, 64, "\(unknown)")
        XCTAssertTrue(unknown.stderr.contains("range"), "the message lists the fields: \(unknown)")
    }

    func testDescribeOfAKeyWithAHiddenValueSaysWhatIsHiddenAndWhy() async throws {
        try await client.create("settings.level", "i", default: .int32(1))
        try await client.set("settings.level", .int32(80))
        try await client.create("settings.level", "i", default: .int32(1), options: ["maximum": .int32(10)])
        let result = try await propctl(["describe", "settings.level"])
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertTrue(result.stdout.contains("hidden_value"), "\(result)")
        XCTAssertTrue(result.stdout.contains("80"), "the hidden value is shown: \(result)")
        XCTAssertTrue(result.stdout.contains("hidden_reason"), "\(result)")
    }

    func testCreateTakesWritersAndSecret() async throws {
        let created = try await propctl(["create", "vault.pin", "s", "--writers", "root,@audio", "--writers", "alice", "--secret"])
        XCTAssertEqual(created.status, 0, "\(created)")
        let listed = try await client.list(prefix: "vault.pin").first
        XCTAssertEqual(listed?.metadata["writers"], .array(of: .string, [.string("root"), .string("@audio"), .string("alice")]))
        XCTAssertEqual(listed?.metadata["secret"], .boolean(true))
        let closed = try await propctl(["create", "vault.key", "s", "--writers", ""])
        XCTAssertEqual(closed.status, 0, "\(closed)")
        let only = try await client.list(prefix: "vault.key").first
        XCTAssertEqual(only?.metadata["writers"], .array(of: .string, []), "an empty list leaves root and the daemon only")
    }

    /// What gsettings list-schemas/list-keys and dconf users reach for: groups, names, changes.
    func testListGroupsNamesAndChangedValuesOnly() async throws {
        try await client.create("settings.a", "i", default: .int32(1))
        try await client.create("settings.b", "i", default: .int32(1))
        try await client.create("settings.audio.volume", "i", default: .int32(5))
        try await client.create("ui.theme", "s", default: .string("dark"))
        try await client.set("settings.b", .int32(2))
        try await client.set("settings.audio.volume", .int32(5))   // set, but to the default
        let groups = try await propctl(["list", "--groups"])
        XCTAssertEqual(groups.status, 0, "\(groups)")
        XCTAssertEqual(lines(groups.stdout), ["settings", "settings.audio", "ui"], groups.stdout)
        let under = try await propctl(["list", "--groups", "settings"])
        XCTAssertEqual(lines(under.stdout), ["settings", "settings.audio"], under.stdout)
        let names = try await propctl(["list", "--names", "settings"])
        XCTAssertEqual(lines(names.stdout), ["settings.a", "settings.audio.volume", "settings.b"], names.stdout)
        let changed = try await propctl(["list", "--changed"])
        XCTAssertEqual(lines(changed.stdout), ["settings.b\ti\t2\t*"], changed.stdout)
        let changedNames = try await propctl(["list", "--changed", "--names"])
        XCTAssertEqual(lines(changedNames.stdout), ["settings.b"], changedNames.stdout)
        let asJSON = try await propctl(["--json", "list", "--names", "ui"])
        XCTAssertEqual(json(asJSON.stdout) as? [String], ["ui.theme"], asJSON.stdout)
        let both = try await propctl(["list", "--groups", "--names"])
        XCTAssertEqual(both.status, 64, "\(both)")
    }

    func testListMarksValuesThatDifferFromTheirDefault() async throws {
        try await client.create("settings.a", "i", default: .int32(1))
        try await client.create("settings.b", "i", default: .int32(1))
        try await client.create("settings.c", "i", default: .int32(1))
        try await client.set("settings.b", .int32(2))
        try await client.set("settings.c", .int32(1))   // set, but to the default: not modified
        let list = try await propctl(["list", "settings"])
        // Piped: no line ends with a tab, and `cut -f3` is still the value.
        XCTAssertEqual(lines(list.stdout), ["settings.a\ti\t1", "settings.b\ti\t2\t*", "settings.c\ti\t1"], list.stdout)
        let asJSON = try await propctl(["--json", "list", "settings"])
        let modified = (json(asJSON.stdout) as? [[String: Any]])?.map { $0["modified"] as? Bool }
        XCTAssertEqual(modified, [false, true, false])
    }

    /// At a terminal `list` aligns its columns under a header line, piped it prints none: both
    /// as the README's tour says.
    func testListAtATerminalPrintsAHeaderAsTheReadmeSays() async throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/script") else { throw XCTSkip("script (bsdutils) is not installed") }
        try await client.create("settings.volume", "i", default: .int32(50))
        // script(1) gives propctl a terminal for its stdout.
        let command = "\(BuildProducts.propctl) --address \(bus.address) list settings"
        let terminal = try await runCommand("/usr/bin/script", ["-q", "-e", "-c", command, "/dev/null"], environment: bus.environment)
        XCTAssertEqual(terminal.status, 0, "\(terminal)")
        let shown = terminal.stdout.replacingOccurrences(of: "\r", with: "").split(separator: "\n").map(String.init)
        XCTAssertEqual(shown.first.map { $0.split(separator: " ").map(String.init) }, ["KEY", "TYPE", "VALUE"], "\(shown)")
        let piped = try await propctl(["list", "settings"])
        XCTAssertEqual(lines(piped.stdout), ["settings.volume\ti\t50"], "\(piped)")
        let readme = try String(contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("README.md"), encoding: .utf8)
        XCTAssertTrue(readme.contains("under a header line (`KEY TYPE VALUE`)"), "the README says a terminal gets a header")
    }

    // MARK: One prefix rule

    func testAPrefixIsAGroupAndItsSubgroupsForListWatchDumpAndReset() async throws {
        try await client.create("view.a", "i", default: .int32(1))
        try await client.create("view.sub.b", "i", default: .int32(2))
        try await client.create("viewmodel.c", "i", default: .int32(3))
        let list = try await propctl(["list", "view"])
        XCTAssertEqual(lines(list.stdout).map { String($0.prefix { $0 != "\t" }) }, ["view.a", "view.sub.b"], list.stdout)
        let dotted = try await propctl(["list", "view."])
        XCTAssertEqual(dotted.stdout, list.stdout)
        let dump = try await propctl(["dump", "view"])
        let dumped = ((json(dump.stdout) as? [String: Any])?["properties"] as? [String: Any])?.keys.sorted()
        XCTAssertEqual(dumped, ["view.a", "view.sub.b"], dump.stdout)
        let watch = try spawn(["watch", "view"])
        defer { watch.signal(SIGKILL) }
        // watch prints the current value of everything it watches first, groups included.
        let printed = await eventually(timeout: 10) { self.lines(watch.stdout).count >= 2 }
        XCTAssertTrue(printed, "watch printed: \(watch.stdout) \(watch.stderr)")
        XCTAssertEqual(lines(watch.stdout), ["view.a 1", "view.sub.b 2"])
        try await client.set("viewmodel.c", .int32(30))
        try await client.set("view.sub.b", .int32(20))
        // The barrier: viewmodel.c changed first, so its line would come before view.sub.b's.
        _ = await eventually(timeout: 10) { self.lines(watch.stdout).count >= 3 }
        XCTAssertEqual(lines(watch.stdout), ["view.a 1", "view.sub.b 2", "view.sub.b 20"])
    }

    // MARK: Text output

    func testControlCharactersAreEscapedInTextOutputButNotInJSON() async throws {
        try await client.create("ui.label", "s", default: .string(""))
        try await client.set("ui.label", .string("a\tb\nc\\d"))
        let list = try await propctl(["list", "ui"])
        XCTAssertEqual(list.stdout, "ui.label\ts\ta\\tb\\nc\\\\d\t*\n")
        let one = try await propctl(["get", "ui.label"])
        XCTAssertEqual(one.stdout, "a\tb\nc\\d\n", "one key prints verbatim")
        let two = try await propctl(["get", "ui.label", "ui.label"])
        XCTAssertEqual(two.stdout, "a\\tb\\nc\\\\d\na\\tb\\nc\\\\d\n", "several print a line each")
        let asJSON = try await propctl(["--json", "list", "ui"])
        XCTAssertEqual((json(asJSON.stdout) as? [[String: Any]])?.first?["value"] as? String, "a\tb\nc\\d")
        let watch = try spawn(["watch", "ui.label"])
        defer { watch.signal(SIGKILL) }
        _ = await eventually(timeout: 10) { !self.lines(watch.stdout).isEmpty }
        XCTAssertEqual(watch.stdout, "ui.label a\\tb\\nc\\\\d\n")
    }

    // MARK: Errors

    func testUnknownKeyHasOneWordingWithDidYouMeanForEveryVerb() async throws {
        try await client.create("settings.volume", "i", default: .int32(1))
        for arguments in [["get", "settings.volme"], ["set", "settings.volme", "3"], ["reset", "settings.volme"],
                          ["delete", "settings.volme"], ["describe", "settings.volme"]] {
            let result = try await propctl(arguments)
            XCTAssertEqual(result.status, 1, "\(result)")
            XCTAssertTrue(result.stderr.contains("org.propbus.PropBus1.Error.UnknownKey: no property named settings.volme; did you mean 'settings.volume'?"),
                          "\(arguments[0]): \(result.stderr)")
        }
        let subcommand = try await propctl(["lst"])
        XCTAssertEqual(subcommand.status, 64)
        XCTAssertTrue(subcommand.stderr.contains("did you mean 'list'?"), subcommand.stderr)
    }

    func testBadValuesExitOneWhetherPropctlOrTheDaemonCatchesThem() async throws {
        try await client.create("audio.volume", "i", default: .int32(5), options: ["maximum": .int32(10)])
        let unparsable = try await propctl(["set", "audio.volume", "loud"])
        XCTAssertEqual(unparsable.status, 1, "\(unparsable)")
        XCTAssertTrue(unparsable.stderr.contains("audio.volume"), unparsable.stderr)
        let outOfRange = try await propctl(["set", "audio.volume", "11"])
        XCTAssertEqual(outOfRange.status, 1, "\(outOfRange)")
        let badDefault = try await propctl(["create", "audio.other", "i", "--default", "x"])
        XCTAssertEqual(badDefault.status, 1, "\(badDefault)")
        let missing = try await propctl(["set", "audio.volume"])
        XCTAssertEqual(missing.status, 64, "a malformed command line stays 64: \(missing)")
    }

    func testNoDaemonGivesOneClearMessage() async throws {
        await daemon.stop()
        _ = await eventually { !((try? await self.client.nameHasOwner()) ?? true) }
        let status = try await propctl(["status"])
        XCTAssertEqual(status.status, 69)
        XCTAssertEqual(status.stdout, "", "one message, on stderr")
        XCTAssertEqual(lines(status.stderr).count, 1, status.stderr)
        XCTAssertTrue(status.stderr.contains("propbusd is not running"), status.stderr)
        let get = try await propctl(["get", "a.b"])
        XCTAssertEqual(get.status, 69)
        XCTAssertEqual(lines(get.stderr).count, 1, get.stderr)
        XCTAssertTrue(get.stderr.contains("propbusd is not running"), get.stderr)
        XCTAssertFalse(get.stderr.contains("ServiceUnknown"), get.stderr)
    }

    func testNoDaemonOnTheSystemBusAdvisesTheSystemService() async throws {
        await daemon.stop()
        _ = await eventually { !((try? await self.client.nameHasOwner()) ?? true) }
        var environment = bus.environment
        environment["DBUS_SYSTEM_BUS_ADDRESS"] = bus.address
        let status = try await runCommand(BuildProducts.propctl, ["--system", "status"], environment: environment)
        XCTAssertEqual(status.status, 69, "\(status)")
        XCTAssertTrue(status.stderr.contains("not running on the system bus") && status.stderr.contains("'systemctl start propbusd'"), status.stderr)
        XCTAssertFalse(status.stderr.contains("--user"), "the session's advice is for the session bus: \(status.stderr)")
        let get = try await runCommand(BuildProducts.propctl, ["--system", "get", "a.b"], environment: environment)
        XCTAssertEqual(get.status, 69, "\(get)")
        XCTAssertTrue(get.stderr.contains("'systemctl start propbusd'") && !get.stderr.contains("--user"), get.stderr)
        let session = try await propctl(["status"])
        XCTAssertTrue(session.stderr.contains("--address \(bus.address)"), "the bus the command line named: \(session.stderr)")
    }

    func testAGroupOrACommandWhereAPropertyGoesIsSaidToBeOne() async throws {
        try await client.create("settings.volume", "i", default: .int32(50))
        try await client.create("settings.audio.balance", "i", default: .int32(0))
        let create = try await propctl(["create-command", "jobs.upper", "--", "tr", "a-z", "A-Z"])
        XCTAssertEqual(create.status, 0, "\(create)")
        let deleteCommand = try await propctl(["delete", "jobs.upper"])
        XCTAssertEqual(deleteCommand.status, 1, "\(deleteCommand)")
        XCTAssertTrue(deleteCommand.stderr.contains("jobs.upper is a command") && deleteCommand.stderr.contains("propctl delete-command jobs.upper"),
                      deleteCommand.stderr)
        let getGroup = try await propctl(["get", "settings"])
        XCTAssertEqual(getGroup.status, 1, "\(getGroup)")
        XCTAssertTrue(getGroup.stderr.contains("settings is a group of 2 keys") && getGroup.stderr.contains("propctl list settings"), getGroup.stderr)
        let getSubgroup = try await propctl(["get", "settings.audio"])
        XCTAssertTrue(getSubgroup.stderr.contains("settings.audio is a group of 1 key,") && getSubgroup.stderr.contains("propctl list settings.audio"),
                      getSubgroup.stderr)
        let typo = try await propctl(["get", "setings"])
        XCTAssertEqual(typo.status, 64, "a word that is no group stays a usage error: \(typo)")
    }

    // MARK: watch across daemon restarts and bus loss

    func testWatchPrintsEveryWatchedKeyAgainAfterADaemonRestart() async throws {
        let state = try makeTemporaryDirectory(prefix: "pbit-watch")
        defer { try? FileManager.default.removeItem(at: state) }
        try await restartDaemon(arguments: ["--state-dir", state.path])
        try await client.create("ui.a", "i", default: .int32(0))
        // A transient value is lost at the restart: it changes without any PropertiesChanged.
        try await client.create("ui.b", "i", default: .int32(0), options: ["persistent": .boolean(false)])
        try await client.set("ui.b", .int32(5))
        let watch = try spawn(["watch", "ui"])
        defer { watch.signal(SIGKILL) }
        _ = await eventually(timeout: 10) { self.lines(watch.stdout).count >= 2 }
        XCTAssertEqual(lines(watch.stdout), ["ui.a 0", "ui.b 5"])
        try await restartDaemon(arguments: ["--state-dir", state.path])
        _ = await eventually(timeout: 10) { self.lines(watch.stdout).count >= 4 }
        XCTAssertEqual(lines(watch.stdout), ["ui.a 0", "ui.b 5", "ui.a 0", "ui.b 0"], watch.stderr)
        XCTAssertTrue(watch.isRunning)
    }

    func testWatchExits69WhenTheBusGoesAway() async throws {
        try await client.create("ui.a", "i", default: .int32(0))
        let watch = try spawn(["watch", "ui.a"])
        defer { watch.signal(SIGKILL) }
        _ = await eventually(timeout: 10) { !self.lines(watch.stdout).isEmpty }
        bus.process.signal(SIGKILL)
        let ended = await watch.waitForExit(timeout: 10)
        XCTAssertEqual(ended, .exited(69), "watch ran on after the bus died: \(watch.stderr)")
    }

    // MARK: dump/load with definitions

    func testDumpDefinitionsThenLoadCreateRestoresKeysOnAFreshDaemon() async throws {
        try await client.create("settings.volume", "i", default: .int32(50),
                                options: ["minimum": .int32(0), "maximum": .int32(100), "description": .string("Volume")])
        try await client.create("settings.theme", "s", default: .string("light"),
                                options: ["choices": .array(of: .variant, [.variant(.string("light")), .variant(.string("dark"))])])
        try await client.set("settings.volume", .int32(70))
        for format in ["json", "lines"] {
            let dump = try await propctl(["dump", "--definitions", "--format", format, "settings"])
            XCTAssertEqual(dump.status, 0, "\(dump)")
            if format == "lines" {
                XCTAssertEqual(lines(dump.stdout).count, 2, dump.stdout)
                XCTAssertTrue(dump.stdout.hasPrefix(#"{"key":"settings.theme","type":"s","value":"light","is_set":false,"definition":{"#), dump.stdout)
            }
            try await client.delete("settings.volume")
            try await client.delete("settings.theme")
            let plain = try await propctl(["load", "-"], stdin: dump.stdout)
            XCTAssertEqual(plain.status, 1, "without --create nothing is created: \(plain)")
            let load = try await propctl(["load", "--create", "-"], stdin: dump.stdout)
            XCTAssertEqual(load.status, 0, "\(load)")
            let listed = try await client.list(prefix: "settings")
            let volume = listed.first { $0.key == "settings.volume" }
            XCTAssertEqual(volume?.value, .int32(70), format)
            XCTAssertEqual(volume?.metadata["maximum"]?.unwrappingVariantOnce, .int32(100), format)
            XCTAssertEqual(volume?.metadata["description"]?.unwrappingVariantOnce, .string("Volume"), format)
            let theme = listed.first { $0.key == "settings.theme" }
            XCTAssertEqual(theme?.metadata["is_set"]?.unwrappingVariantOnce, .boolean(false), format)
            XCTAssertEqual(theme?.metadata["choices"].map { _ in true }, true, format)
        }
    }

    func testLoadCreateDeletesTheKeysItCreatedWhenTheValuesAreRefused() async throws {
        let document = #"{"properties": {"new.a": {"type": "i", "value": 500, "definition": {"default": 1, "maximum": 10}}}}"#
        let load = try await propctl(["load", "--create", "-"], stdin: document)
        XCTAssertEqual(load.status, 1, "\(load)")
        XCTAssertTrue(load.stderr.contains("OutOfRange") && load.stderr.contains("new.a"), load.stderr)
        let keys = try await client.list().map(\.key)
        XCTAssertEqual(keys, [], "all or nothing: the key created for the refused document is gone")
    }
}
