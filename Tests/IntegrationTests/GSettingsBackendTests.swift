import Foundation
import XCTest

/// The GSettings backend module (`GSETTINGS_BACKEND=propbus`, libgiopropbus.so) with unchanged
/// GSettings users: `gsettings` itself and python3-gi programs, against a compiled test schema,
/// on the test's private bus with a real propbusd.
final class GSettingsBackendTests: DaemonTestCase, @unchecked Sendable {
    private var scratch: URL!
    private var world: GSettingsWorld!
    private var followers: [ChildProcess] = []

    override var daemonArguments: [String] { ["--config-dir", scratch.appendingPathComponent("config").path] }

    override func setUp() async throws {
        scratch = try makeTemporaryDirectory(prefix: "pbit-gs")
        try FileManager.default.createDirectory(at: scratch.appendingPathComponent("config/mandatory.d"), withIntermediateDirectories: true)
        try await super.setUp()
        world = try await GSettingsWorld.make(in: scratch, busEnvironment: bus.environment)
    }

    override func tearDown() async throws {
        for follower in followers { await follower.stop() }
        followers = []
        try await super.tearDown()
        try? FileManager.default.removeItem(at: scratch)
    }

    private func propctl(_ arguments: [String]) async throws -> CommandResult {
        try await tool(BuildProducts.propctl, ["--address", bus.address] + arguments, timeout: 30)
    }

    private func gsettings(_ arguments: [String]) async throws -> CommandResult {
        try await world.gsettings(arguments)
    }

    private func trimmed(_ result: CommandResult) -> String {
        result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A python3 GSettings program following the test schema, once it has read every key.
    private func follow(_ schema: String = GSettingsWorld.schemaID, path: String = "") async throws -> ChildProcess {
        let follower = try world.startPython(GSettingsScripts.follower, [schema, path])
        followers.append(follower)
        let ready = await eventually(timeout: 60) { follower.stdout.contains("ready\n") || !follower.isRunning }
        guard ready, follower.isRunning else { throw TestSetupError("the GSettings follower did not start: \(follower.stdout) \(follower.stderr)") }
        return follower
    }

    // MARK: gsettings and propctl see one value

    func testGsettingsSetWritesATypedPropbusKeyThatPropctlReadsAndWrites() async throws {
        let set = try await gsettings(["set", GSettingsWorld.schemaID, "font-name", "Sans 12"])
        XCTAssertTrue(set.succeeded, "\(set)")
        let get = try await gsettings(["get", GSettingsWorld.schemaID, "font-name"])
        XCTAssertEqual(trimmed(get), "'Sans 12'", "\(get)")
        let viaPropctl = try await propctl(["get", "org.propbus.gstest.font_name"])
        XCTAssertEqual(trimmed(viaPropctl), "Sans 12", "\(viaPropctl)")
        // Created on first write with the schema's type, default and summary.
        let description = try await propctl(["describe", "org.propbus.gstest.font_name", "--field", "description"])
        XCTAssertEqual(trimmed(description), "The interface font", "\(description)")
        let defaultValue = try await propctl(["describe", "org.propbus.gstest.font_name", "--field", "default"])
        XCTAssertEqual(trimmed(defaultValue), "Cantarell 11", "\(defaultValue)")

        let written = try await propctl(["set", "org.propbus.gstest.font_name", "Mono 9"])
        XCTAssertTrue(written.succeeded, "\(written)")
        let seen = try await gsettings(["get", GSettingsWorld.schemaID, "font-name"])
        XCTAssertEqual(trimmed(seen), "'Mono 9'", "\(seen)")

        let reset = try await gsettings(["reset", GSettingsWorld.schemaID, "font-name"])
        XCTAssertTrue(reset.succeeded, "\(reset)")
        let isSet = try await propctl(["describe", "org.propbus.gstest.font_name", "--field", "is_set"])
        XCTAssertEqual(trimmed(isSet), "false", "\(isSet)")
        let afterReset = try await gsettings(["get", GSettingsWorld.schemaID, "font-name"])
        XCTAssertEqual(trimmed(afterReset), "'Cantarell 11'", "\(afterReset)")
    }

    /// What GSettings writes is the user's, as in dconf, also when it equals what the key reads
    /// without one (a Set of that value changes nothing, so the daemon would keep it unset and
    /// GSettings would read its schema's default); a key's own default never stands in for the
    /// schema's.
    func testAWriteEqualToTheKeysDefaultIsStoredAsTheUsers() async throws {
        let created = try await propctl(["create", "org.propbus.gstest.count", "i", "--default", "50"])
        XCTAssertTrue(created.succeeded, "\(created)")
        let schemaDefault = try await gsettings(["get", GSettingsWorld.schemaID, "count"])
        XCTAssertEqual(trimmed(schemaDefault), "3", "\(schemaDefault)")
        let set = try await gsettings(["set", GSettingsWorld.schemaID, "count", "50"])
        XCTAssertTrue(set.succeeded, "\(set)")
        let read = try await gsettings(["get", GSettingsWorld.schemaID, "count"])
        XCTAssertEqual(trimmed(read), "50", "\(read)")
        let isSet = try await propctl(["describe", "org.propbus.gstest.count", "--field", "is_set"])
        XCTAssertEqual(trimmed(isSet), "true", "\(isSet)")
        // A new key created by a write of its type's zero holds it too.
        let zero = try await gsettings(["set", GSettingsWorld.schemaID, "enabled", "false"])
        XCTAssertTrue(zero.succeeded, "\(zero)")
        let enabled = try await gsettings(["get", GSettingsWorld.schemaID, "enabled"])
        XCTAssertEqual(trimmed(enabled), "false", "\(enabled)")
        let otherProcess = try await propctl(["describe", "org.propbus.gstest.enabled", "--field", "is_set"])
        XCTAssertEqual(trimmed(otherProcess), "true", "\(otherProcess)")
    }

    /// Each GVariant type becomes a D-Bus type (a maybe an array of at most one one-field
    /// struct); `gsettings get` reads back what it wrote.
    func testGVariantTypesMapToDBusTypesBothWays() async throws {
        let cases: [(key: String, text: String, dbusType: String, json: String)] = [
            ("count", "42", "i", "42"),
            ("enabled", "false", "b", "false"),
            ("ratio", "0.25", "d", "0.25"),
            ("big", "int64 -9223372036854775808", "x", "-9223372036854775808"),
            ("huge", "uint64 18446744073709551615", "t", "18446744073709551615"),
            ("tags", "['x', 'y']", "as", #"["x","y"]"#),
            ("window-size", "(800, 600)", "(ii)", "[800,600]"),
            ("options", "{'a': <1>, 'b': <'two'>}", "a{sv}", #"{"a":1,"b":"two"}"#),
            ("maybe-name", "@ms 'here'", "a(s)", #"[["here"]]"#),
            ("maybe-list", "@mai nothing", "a(ai)", "[]"),
            ("colour", "'blue'", "s", "blue"),
            ("sides", "['top', 'left']", "as", #"["top","left"]"#),
        ]
        for item in cases {
            let set = try await gsettings(["set", GSettingsWorld.schemaID, item.key, item.text])
            XCTAssertTrue(set.succeeded, "\(item.key): \(set)")
        }
        let listed = try await propctl(["--json", "list", "org.propbus.gstest"])
        XCTAssertTrue(listed.succeeded, "\(listed)")
        for item in cases {
            let key = "org.propbus.gstest." + item.key.replacingOccurrences(of: "-", with: "_")
            let type = try await propctl(["describe", key, "--field", "type"])
            XCTAssertEqual(trimmed(type), item.dbusType, "\(item.key): \(type)")
            let value = try await propctl(["get", key])
            XCTAssertEqual(trimmed(value), item.json, "\(item.key): \(value)")
            let back = try await gsettings(["get", GSettingsWorld.schemaID, item.key])
            XCTAssertTrue(back.succeeded, "\(item.key): \(back)")
        }
        let maybe = try await gsettings(["get", GSettingsWorld.schemaID, "maybe-name"])
        XCTAssertEqual(trimmed(maybe), "@ms 'here'", "\(maybe)")
        let nothing = try await gsettings(["get", GSettingsWorld.schemaID, "maybe-list"])
        XCTAssertEqual(trimmed(nothing), "@mai nothing", "\(nothing)")
    }

    /// A relocatable schema's path with characters no key may hold (gnome-terminal's
    /// `profiles:/:UUID/`) maps to an escaped key, and back.
    func testPathsWithCharactersKeysCannotHoldAreEscapedReversibly() async throws {
        let path = "/org/propbus/gstest/profiles:/:b1dcc9dd-5262/"
        let set = try await gsettings(["set", "org.propbus.gstest.profile:" + path, "visible-name", "Work"])
        XCTAssertTrue(set.succeeded, "\(set)")
        let key = "org.propbus.gstest._profiles_3a.__3ab1dcc9dd_2d5262.visible_name"
        let value = try await propctl(["get", key])
        XCTAssertEqual(trimmed(value), "Work", "\(value)")
        let written = try await propctl(["set", key, "Home"])
        XCTAssertTrue(written.succeeded, "\(written)")
        let back = try await gsettings(["get", "org.propbus.gstest.profile:" + path, "visible-name"])
        XCTAssertEqual(trimmed(back), "'Home'", "\(back)")
    }

    // MARK: Notifications

    func testGsettingsMonitorSeesAPropctlSet() async throws {
        for (key, value) in [("count", "1"), ("font-name", "Before")] {
            let set = try await gsettings(["set", GSettingsWorld.schemaID, key, value])
            XCTAssertTrue(set.succeeded, "\(set)")
        }
        let monitor = try ChildProcess("gsettings", ["monitor", GSettingsWorld.schemaID], environment: world.environment)
        followers.append(monitor)
        // The monitor says nothing until it is subscribed and something changes: keep changing
        // the key until it shows one change, then every later change must show.
        var attempt = 0
        let subscribed = await eventually(timeout: 60) {
            attempt += 1
            _ = try? await self.propctl(["set", "org.propbus.gstest.count", String(attempt % 90 + 1)])
            return monitor.stdout.contains("count: ")
        }
        XCTAssertTrue(subscribed, "gsettings monitor never showed a change: \(monitor.stdout) \(monitor.stderr)")
        let set = try await propctl(["set", "org.propbus.gstest.font_name", "Seen by the monitor"])
        XCTAssertTrue(set.succeeded, "\(set)")
        let seen = await eventually(timeout: 30) { monitor.stdout.contains("font-name: 'Seen by the monitor'") }
        XCTAssertTrue(seen, "\(monitor.stdout)")
    }

    /// Another program's Apply of several keys of one path reaches a GSettings as one
    /// change-event, as dconf sends one change of several keys.
    func testAnotherProgramsApplyIsOneChangeEvent() async throws {
        for (key, value) in [("greeting", "g0"), ("farewell", "f0")] {
            let set = try await gsettings(["set", GSettingsWorld.schemaID, key, value])
            XCTAssertTrue(set.succeeded, "\(set)")
        }
        let follower = try await follow()
        try await client.apply(set: [("org.propbus.gstest.greeting", .string("g1")), ("org.propbus.gstest.farewell", .string("f1"))])
        let seen = await eventually(timeout: 30) { follower.stdout.contains("changed farewell 'f1'") && follower.stdout.contains("changed greeting 'g1'") }
        XCTAssertTrue(seen, "\(follower.stdout)")
        let events = follower.stdout.split(separator: "\n").filter { $0.hasPrefix("event ") }
        XCTAssertEqual(events, ["event farewell,greeting"], "\(follower.stdout)")
    }

    /// An application's own write is announced once, when it is made; its echo from the daemon
    /// is not announced again as someone else's change.
    func testOwnWritesAreNotEchoedBack() async throws {
        let script = GSettingsScripts.prelude + "\n" + #"""
        s = Gio.Settings.new(ID)
        counts = {}
        s.connect("changed", lambda settings, key: counts.__setitem__(key, counts.get(key, 0) + 1))
        for i in range(20):
            s.set_int("count", i + 1)
        Gio.Settings.sync()
        print("synced", flush=True)
        # The test now changes `greeting` with propctl: once that is seen, every signal the
        # daemon sent for the writes above has arrived too (it sends them in order).
        check(settle(lambda: counts.get("greeting", 0) > 0, timeout=60), "the marker change arrived")
        print("count", counts.get("count", 0), flush=True)
        finish()
        """#
        let greeting = try await gsettings(["set", GSettingsWorld.schemaID, "greeting", "before the marker"])
        XCTAssertTrue(greeting.succeeded, "\(greeting)")
        let writer = try world.startPython(script)
        followers.append(writer)
        let synced = await eventually(timeout: 60) { writer.stdout.contains("synced") || !writer.isRunning }
        XCTAssertTrue(synced, "\(writer.stdout) \(writer.stderr)")
        let marker = try await propctl(["set", "org.propbus.gstest.greeting", "marker"])
        XCTAssertTrue(marker.succeeded, "\(marker)")
        let ended = await writer.waitForExit(timeout: 60)
        XCTAssertEqual(ended, .exited(0), "\(writer.stdout) \(writer.stderr)")
        XCTAssertTrue(writer.stdout.contains("count 20\n"), "one notification per write, none echoed: \(writer.stdout)")
    }

    // MARK: Writability

    func testALockedKeyIsNotWritableAndItsWriteFails() async throws {
        let mine = try await gsettings(["set", GSettingsWorld.schemaID, "font-name", "Mine"])
        XCTAssertTrue(mine.succeeded, "\(mine)")
        let follower = try await follow()
        // Tests run as root, whom a lock without --for leaves alone: lock root by name.
        let lock = try await propctl(["lock", "org.propbus.gstest.font_name", "Locked Font", "--for", "root"])
        XCTAssertTrue(lock.succeeded, "\(lock)")

        let writable = try await gsettings(["writable", GSettingsWorld.schemaID, "font-name"])
        XCTAssertEqual(trimmed(writable), "false", "\(writable)")
        let value = try await gsettings(["get", GSettingsWorld.schemaID, "font-name"])
        XCTAssertEqual(trimmed(value), "'Locked Font'", "\(value)")
        let refused = try await gsettings(["set", GSettingsWorld.schemaID, "font-name", "Other"])
        XCTAssertFalse(refused.succeeded, "\(refused)")
        let inProcess = try await world.python(GSettingsScripts.prelude + "\n" + #"""
        s = Gio.Settings.new(ID)
        print("accepted", s.set_string("font-name", "Other"), flush=True)
        """#)
        XCTAssertTrue(inProcess.stdout.contains("accepted False"), "g_settings_set returns FALSE: \(inProcess)")
        let kept = try await propctl(["describe", "org.propbus.gstest.font_name", "--field", "user_value"])
        XCTAssertEqual(trimmed(kept), "Mine", "\(kept)")

        let notified = await eventually(timeout: 30) {
            follower.stdout.contains("writable font-name False") && follower.stdout.contains("changed font-name 'Locked Font'")
        }
        XCTAssertTrue(notified, "writable-changed and changed reach a running application: \(follower.stdout)")

        let unlock = try await propctl(["unlock", "org.propbus.gstest.font_name"])
        XCTAssertTrue(unlock.succeeded, "\(unlock)")
        let again = try await gsettings(["writable", GSettingsWorld.schemaID, "font-name"])
        XCTAssertEqual(trimmed(again), "true", "\(again)")
        let restored = try await gsettings(["get", GSettingsWorld.schemaID, "font-name"])
        XCTAssertEqual(trimmed(restored), "'Mine'", "\(restored)")
        let back = await eventually(timeout: 30) { follower.stdout.contains("writable font-name True") }
        XCTAssertTrue(back, "\(follower.stdout)")
    }

    // MARK: Delay-apply

    /// `g_settings_delay` + `g_settings_apply` is one Manager.Apply: one change in history, and
    /// when the daemon refuses one key, no key changes.
    func testDelayedApplyIsOneAtomicApply() async throws {
        for (key, value) in [("greeting", "g0"), ("farewell", "f0"), ("count", "5")] {
            let set = try await gsettings(["set", GSettingsWorld.schemaID, key, value])
            XCTAssertTrue(set.succeeded, "\(set)")
        }
        let applied = try await world.python(GSettingsScripts.delayedApply, ["g1", "f1", "6"])
        XCTAssertTrue(applied.stdout.contains("after g1 | f1 | 6"), "\(applied)")
        let history = try await propctl(["--json", "history", "org.propbus.gstest"])
        let rows = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(history.stdout.utf8)) as? [[String: Any]], "\(history)")
        let applyRows = rows.filter { ($0["via"] as? String) == "Apply" }
        XCTAssertEqual(Set(applyRows.compactMap { $0["key"] as? String }),
                       ["org.propbus.gstest.greeting", "org.propbus.gstest.farewell", "org.propbus.gstest.count"], "\(rows)")
        XCTAssertEqual(Set(applyRows.compactMap { ($0["change"] as? NSNumber)?.uint64Value }).count, 1, "one change: \(applyRows)")

        // The daemon refuses count above 50 (a definition the schema knows nothing of).
        let narrowed = try await propctl(["create", "org.propbus.gstest.count", "i", "--default", "3", "--maximum", "50"])
        XCTAssertTrue(narrowed.succeeded, "\(narrowed)")
        let refused = try await world.python(GSettingsScripts.delayedApply, ["g2", "f2", "70"])
        XCTAssertTrue(refused.stdout.contains("after g1 | f1 | 6"), "the application reads the values kept: \(refused)")
        XCTAssertTrue(refused.stderr.contains("OutOfRange"), "and is told why: \(refused)")
        for (key, value) in [("greeting", "g1"), ("farewell", "f1"), ("count", "6")] {
            let kept = try await propctl(["get", "org.propbus.gstest." + key])
            XCTAssertEqual(trimmed(kept), value, "\(key): \(kept)")
        }
    }

    // MARK: Cost of reads

    /// After the first read of a path, reads are answered from the copy the signals keep: a bus
    /// monitor sees nothing for a thousand reads, and one ListProperties for a new path's first.
    func testReadsAfterTheFirstSendNoMessage() async throws {
        let set = try await gsettings(["set", GSettingsWorld.schemaID, "font-name", "Counted"])
        XCTAssertTrue(set.succeeded, "\(set)")
        let go = scratch.appendingPathComponent("go").path, leave = scratch.appendingPathComponent("leave").path
        let reader = try world.startPython(GSettingsScripts.repeatedReads, ["font-name", go, "1000", leave])
        followers.append(reader)
        let loaded = await eventually(timeout: 60) { reader.stdout.contains("loaded 'Counted'") || !reader.isRunning }
        XCTAssertTrue(loaded, "\(reader.stdout) \(reader.stderr)")

        let monitor = try ChildProcess("dbus-monitor", ["--address", bus.address, "type='method_call'"], environment: bus.environment)
        followers.append(monitor)
        let start = try await monitorMarker(monitor, retry: true)
        _ = FileManager.default.createFile(atPath: go, contents: nil)
        let done = await eventually(timeout: 60) { reader.stdout.contains("done") || !reader.isRunning }
        XCTAssertTrue(done, "\(reader.stdout) \(reader.stderr)")
        let end = try await monitorMarker(monitor, retry: false)
        _ = FileManager.default.createFile(atPath: leave, contents: nil)
        let ended = await reader.waitForExit(timeout: 30)
        XCTAssertEqual(ended, .exited(0), "\(reader.stdout) \(reader.stderr)")

        let window = monitor.stdout.split(separator: "\n", omittingEmptySubsequences: false)[start..<end]
        let calls = window.filter { $0.hasPrefix("method call") && !$0.contains(" sender=\(client.connection.uniqueName) ") }
        let toDaemon = calls.filter { $0.contains("destination=org.propbus.PropBus1") }
        XCTAssertEqual(toDaemon.count, 1, "only the other path's first read asks the daemon: \(calls)")
        XCTAssertTrue(toDaemon.first?.contains("member=ListProperties") ?? false, "\(calls)")
        XCTAssertTrue(calls.allSatisfy { $0.contains("member=ListProperties") || $0.contains("member=AddMatch") }, "\(calls)")
        XCTAssertTrue(window.contains { $0.contains("string \"org.propbus.gstest_other.\"") }, "\(window)")
    }

    /// Marks the monitor's output: returns the number of lines it printed up to the marker, a
    /// Ping from the test client to the bus (the monitor prints messages in the order the bus
    /// routed them). With `retry`, pings until the monitor is attached.
    private func monitorMarker(_ monitor: ChildProcess, retry: Bool) async throws -> Int {
        for _ in 0..<(retry ? 100 : 1) {
            let before = monitor.stdout.components(separatedBy: "member=Ping").count
            try await client.call(at: "/org/freedesktop/DBus", PropBusAPI.peer, "Ping", destination: "org.freedesktop.DBus")
            let seen = await eventually(timeout: retry ? 0.3 : 30) { monitor.stdout.components(separatedBy: "member=Ping").count > before }
            if seen {
                let lines = monitor.stdout.split(separator: "\n", omittingEmptySubsequences: false)
                return (lines.lastIndex { $0.contains("member=Ping") } ?? lines.count - 1) + 1
            }
        }
        throw TestSetupError("dbus-monitor never showed the marker Ping: \(monitor.stdout) \(monitor.stderr)")
    }

    // MARK: The daemon coming and going

    func testARestartOfPropbusdIsFollowed() async throws {
        let set = try await gsettings(["set", GSettingsWorld.schemaID, "font-name", "Before"])
        XCTAssertTrue(set.succeeded, "\(set)")
        let follower = try await follow()
        try await restartDaemon(arguments: daemonArguments)
        let after = try await propctl(["set", "org.propbus.gstest.font_name", "After restart"])
        XCTAssertTrue(after.succeeded, "\(after)")
        let seen = await eventually(timeout: 30) { follower.stdout.contains("changed font-name 'After restart'") }
        XCTAssertTrue(seen, "\(follower.stdout) \(follower.stderr)")
    }

    func testWithoutADaemonGSettingsReadsSchemaDefaultsAndRefusesWrites() async throws {
        let set = try await gsettings(["set", GSettingsWorld.schemaID, "font-name", "Stored"])
        XCTAssertTrue(set.succeeded, "\(set)")
        await daemon.stop()
        _ = await eventually { !((try? await client.nameHasOwner()) ?? true) }
        let get = try await gsettings(["get", GSettingsWorld.schemaID, "font-name"])
        XCTAssertEqual(trimmed(get), "'Cantarell 11'", "\(get)")
        let writable = try await gsettings(["writable", GSettingsWorld.schemaID, "font-name"])
        XCTAssertEqual(trimmed(writable), "false", "\(writable)")
        daemon = try await Daemon.start(on: bus, arguments: daemonArguments, watcher: client)
        let back = try await gsettings(["get", GSettingsWorld.schemaID, "font-name"])
        XCTAssertEqual(trimmed(back), "'Stored'", "\(back)")
    }

    /// With the session's activation file, the first GSettings call starts propbusd.
    func testTheFirstGSettingsCallActivatesPropbusd() async throws {
        let activation = try await ActivationBus.start()
        do {
            let activated = try await GSettingsWorld.make(in: scratch.appendingPathComponent("activation"), busEnvironment: activation.environment)
            let set = try await activated.gsettings(["set", GSettingsWorld.schemaID, "font-name", "Activated"], timeout: 60)
            XCTAssertTrue(set.succeeded, "\(set)")
            let get = try await activated.gsettings(["get", GSettingsWorld.schemaID, "font-name"], timeout: 60)
            XCTAssertEqual(trimmed(get), "'Activated'", "\(get)")
        } catch {
            await activation.stop()
            throw error
        }
        await activation.stop()
    }

    // MARK: GLib's own expectations

    func testGLibsGSettingsExpectationsOfABackend() async throws {
        let result = try await world.python(GSettingsScripts.glibCases, timeout: 120)
        XCTAssertTrue(result.succeeded && result.stdout.contains("FAILURES 0"), "\(result)")
        XCTAssertEqual(result.stdout.components(separatedBy: "ran ").count - 1, 11, "every case ran: \(result)")
        // What they wrote is propbusd's, typed.
        for (key, json) in [("huge", "18446744073709551615"), ("big", "-9223372036854775808"), ("tiny", "255"),
                            ("maybe_list", "[[[1,2]]]"), ("maybe_name", #"[["just this"]]"#), ("child.depth", "42"),
                            ("colour", "blue")] {
            let value = try await propctl(["get", "org.propbus.gstest." + key])
            XCTAssertEqual(trimmed(value), json, "\(key): \(value)")
        }
    }
}
