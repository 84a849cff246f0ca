import DBus
import Foundation
import XCTest

/// propbusd as systemd sees it: sd_notify on a socket of the test's own, the watchdog, the
/// SIGTERM order, D-Bus activation from the project's activation file, the units and the install.
final class SystemdTests: XCTestCase {
    var bus: PrivateBus!
    var client: Client!
    var daemon: ChildProcess?

    override func setUp() async throws {
        try await super.setUp()
        bus = try await PrivateBus.start()
        client = try await Client.connect(to: bus)
    }

    override func tearDown() async throws {
        if let ended = daemon?.termination, ended.bySignal {
            XCTFail("propbusd \(ended) during the test; stderr:\n\(daemon?.stderr ?? "")")
        }
        client?.close()
        await daemon?.stop()
        await bus?.stop()
        daemon = nil
        client = nil
        bus = nil
        try await super.tearDown()
    }

    /// Starts propbusd on the private bus as systemd would: with `NOTIFY_SOCKET` and `extra`.
    private func startDaemon(notifyingTo socket: NotifySocket, environment extra: [String: String] = [:]) throws -> ChildProcess {
        var environment = bus.environment
        environment["NOTIFY_SOCKET"] = socket.notifySocket
        environment.merge(extra) { $1 }
        let process = try ChildProcess(BuildProducts.propbusd, ["--address", bus.address], environment: environment)
        daemon = process
        return process
    }

    private func assignments(_ messages: [String]) -> [String] { messages.flatMap(NotifySocket.lines) }

    // MARK: sd_notify

    func testReadyIsSentOnlyOnceTheNameIsOwnedAndStoppingPrecedesAZeroExit() async throws {
        let socket = try NotifySocket()
        let process = try startDaemon(notifyingTo: socket)

        let beforeReady = await socket.wait(for: "READY=1")
        // Checked the moment READY=1 is seen: a unit ordered after propbusd may call it now.
        let owned = try await client.nameHasOwner()
        XCTAssertTrue(assignments(beforeReady).contains("READY=1"), "no READY=1: \(beforeReady); stderr: \(process.stderr)")
        XCTAssertTrue(owned, "READY=1 was sent before \(PropBusAPI.busName) was owned")
        XCTAssertTrue(assignments(beforeReady).contains { $0.hasPrefix("STATUS=Serving ") }, "\(beforeReady)")
        try await client.call(PropBusAPI.peer, "Ping")

        let rule = MatchRule(sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                             arg0: PropBusAPI.busName)
        let ownerChanges = SignalRecorder()
        client.connection.queue.sync {
            _ = client.connection.addSignalHandler(matching: rule) { ownerChanges.append(ReceivedSignal($0)) }
        }
        try await client.connection.addMatch(rule)

        process.signal(SIGTERM)
        let released = await ownerChanges.wait(count: 1)
        XCTAssertEqual(released.first?.arguments.last, .string(""), "\(released)")
        // A local datagram is queued by the time sendto returns: STOPPING=1 must be here already.
        XCTAssertTrue(assignments(socket.messages).contains("STOPPING=1"), "the name was released before STOPPING=1: \(socket.messages)")
        let afterTerm = await socket.wait(for: "STOPPING=1")
        let ended = await process.waitForExit(timeout: 10)
        XCTAssertEqual(ended, .exited(0), "stderr: \(process.stderr)")
        let all = assignments(afterTerm)
        XCTAssertEqual(all.filter { $0 == "READY=1" || $0 == "STOPPING=1" }, ["READY=1", "STOPPING=1"], "\(afterTerm)")
        let owner = try await client.nameHasOwner()
        XCTAssertFalse(owner)
    }

    func testAbstractNotifySocketGetsReadyAndStopping() async throws {
        let socket = try NotifySocket(abstract: true)
        XCTAssertTrue(socket.notifySocket.hasPrefix("@"))
        let process = try startDaemon(notifyingTo: socket)
        let ready = await socket.wait(for: "READY=1")
        XCTAssertTrue(assignments(ready).contains("READY=1"), "\(ready); stderr: \(process.stderr)")
        process.signal(SIGTERM)
        let stopping = await socket.wait(for: "STOPPING=1")
        XCTAssertTrue(assignments(stopping).contains("STOPPING=1"), "\(stopping)")
        let ended = await process.waitForExit(timeout: 10)
        XCTAssertEqual(ended, .exited(0), "stderr: \(process.stderr)")
    }

    func testWatchdogPingsAtHalfThePeriod() async throws {
        let socket = try NotifySocket()
        // 200 ms: a ping every 100 ms.
        let process = try startDaemon(notifyingTo: socket, environment: ["WATCHDOG_USEC": "200000"])
        await socket.wait(for: "READY=1")
        let started = Date()
        let messages = await socket.wait(timeout: 5) { $0.filter { $0 == "WATCHDOG=1" }.count >= 11 }
        let elapsed = Date().timeIntervalSince(started)
        XCTAssertGreaterThanOrEqual(messages.filter { $0 == "WATCHDOG=1" }.count, 11, "\(messages); stderr: \(process.stderr)")
        // Eleven pings (the first at once, with READY=1) take about 1 s; a ping per period, 2 s.
        XCTAssertLessThan(elapsed, 1.6, "pings came too slowly: \(messages)")
    }

    func testWatchdogMeantForAnotherProcessIsNotPinged() async throws {
        let socket = try NotifySocket()
        // WATCHDOG_PID names the process the watchdog is for (sd_watchdog_enabled(3)).
        let process = try startDaemon(notifyingTo: socket, environment: ["WATCHDOG_USEC": "100000", "WATCHDOG_PID": "1"])
        await socket.wait(for: "READY=1")
        // Time must pass for a ping to fall due (every 50 ms here); the sleep gives six periods.
        // STOPPING=1 is then the barrier: datagrams from one sender arrive in order, so any ping
        // sent before it is in the socket once it is.
        try await Task.sleep(nanoseconds: 300_000_000)
        process.signal(SIGTERM)
        let messages = await socket.wait(for: "STOPPING=1")
        XCTAssertTrue(assignments(messages).contains("READY=1"), "\(messages); stderr: \(process.stderr)")
        XCTAssertTrue(assignments(messages).contains("STOPPING=1"), "\(messages); stderr: \(process.stderr)")
        XCTAssertFalse(messages.contains("WATCHDOG=1"), "\(messages)")
    }

    func testWithoutNotifySocketTheDaemonStartsAndStopsAsBefore() async throws {
        let process = try ChildProcess(BuildProducts.propbusd, ["--address", bus.address], environment: bus.environment)
        daemon = process
        let owned = await eventually(timeout: 10) { (try? await self.client.nameHasOwner()) ?? false }
        XCTAssertTrue(owned, "stderr: \(process.stderr)")
        process.signal(SIGTERM)
        let ended = await process.waitForExit(timeout: 10)
        XCTAssertEqual(ended, .exited(0), "stderr: \(process.stderr)")
    }

    func testCallsDuringShutdownEndPromptlyWithAnErrorThatMeansUnavailable() async throws {
        let socket = try NotifySocket()
        let process = try startDaemon(notifyingTo: socket)
        await socket.wait(for: "READY=1")
        // Callers keep calling across the SIGTERM. Each must end soon, either refused by the
        // stopping daemon (NoServer), or told by the bus that the daemon is gone.
        let allowed: Set<String> = [DBusError.Name.noServer, DBusError.Name.serviceUnknown, DBusError.Name.nameHasNoOwner,
                                    DBusError.Name.noReply]
        let client = self.client!
        let outcomes = await withTaskGroup(of: String.self) { group in
            for _ in 0 ..< 8 {
                group.addTask {
                    while true {
                        do {
                            // Not Peer.Ping: libdbus answers that itself, whatever the daemon does.
                            try await client.call(PropBusAPI.properties, "Get", [.string(PropBusAPI.manager), .string("Version")])
                        } catch let error as DBusError {
                            return error.name
                        } catch {
                            return "\(error)"
                        }
                    }
                }
            }
            try? await Task.sleep(nanoseconds: 50_000_000)
            process.signal(SIGTERM)
            var outcomes: [String] = []
            for await outcome in group { outcomes.append(outcome) }
            return outcomes
        }
        XCTAssertEqual(outcomes.count, 8)
        for outcome in outcomes { XCTAssertTrue(allowed.contains(outcome), "a call during shutdown ended with \(outcome)") }
        let ended = await process.waitForExit(timeout: 10)
        XCTAssertEqual(ended, .exited(0), "stderr: \(process.stderr)")
    }

    // MARK: D-Bus activation

    /// On a bus that would start the daemon, `status` says so instead of telling the user to
    /// start it by hand, and starts nothing itself.
    func testStatusOnABusThatWouldActivateTheDaemonSaysSo() async throws {
        let activationBus = try await ActivationBus.start()
        let connection = try await Connection.connect(to: .address(activationBus.address))
        let status = try await runCommand(BuildProducts.propctl, ["--address", activationBus.address, "status"],
                                          environment: activationBus.environment, timeout: 20)
        let json = try await runCommand(BuildProducts.propctl, ["--address", activationBus.address, "--json", "status"],
                                        environment: activationBus.environment, timeout: 20)
        let after = try await connection.callBus("NameHasOwner", [.string(PropBusAPI.busName)])
        connection.close()
        await activationBus.stop()
        XCTAssertEqual(status.status, 0, "\(status)")
        XCTAssertTrue(status.stdout.contains("activatable"), "\(status)")
        XCTAssertFalse(status.stdout.contains("systemctl") || status.stderr.contains("systemctl"), "\(status)")
        XCTAssertTrue(json.stdout.contains("\"activatable\": true") || json.stdout.contains("\"activatable\":true"), "\(json)")
        XCTAssertEqual(after.first?.boolValue, false, "status starts nothing")
    }

    func testFirstCallOnTheSessionBusActivatesTheDaemon() async throws {
        let activationBus = try await ActivationBus.start()
        let connection = try await Connection.connect(to: .address(activationBus.address))
        var activatedPID: UInt32?
        do {
            let before = try await connection.callBus("NameHasOwner", [.string(PropBusAPI.busName)])
            XCTAssertEqual(before.first?.boolValue, false, "nothing may run before the first call")

            // busctl asks the bus to auto-start the destination, as every D-Bus client does.
            let result = try await runCommand("busctl", ["--address=\(activationBus.address)", "get-property", PropBusAPI.busName,
                                                         PropBusAPI.rootPath, PropBusAPI.manager, "Version"],
                                              environment: activationBus.environment, timeout: 20)
            XCTAssertEqual(result.status, 0, "\(result)\nbus: \(activationBus.process.stderr)")
            XCTAssertTrue(result.stdout.hasPrefix("s \""), result.stdout)

            let pid = try await connection.callBus("GetConnectionUnixProcessID", [.string(PropBusAPI.busName)])
            guard case .uint32(let number)? = pid.first else { throw TestSetupError("GetConnectionUnixProcessID replied \(pid)") }
            activatedPID = number
            let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(number)/exe")
            XCTAssertEqual(URL(fileURLWithPath: executable).lastPathComponent, "propbusd")

            // The activated daemon is the bus's child, not ours: stop it by pid and watch the name.
            kill(pid_t(number), SIGTERM)
            let released = await eventually(timeout: 10) {
                let reply = try? await connection.callBus("NameHasOwner", [.string(PropBusAPI.busName)])
                return reply?.first?.boolValue == false
            }
            XCTAssertTrue(released, "the activated propbusd did not release its name on SIGTERM")
            activatedPID = nil
        } catch {
            XCTFail("\(error)")
        }
        if let activatedPID { kill(pid_t(activatedPID), SIGKILL) }
        connection.close()
        await activationBus.stop()
    }

    // MARK: Units and install

    /// The repository root (Tests/IntegrationTests/SystemdTests.swift is two levels down).
    private static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    func testUnitsPassSystemdAnalyzeVerify() async throws {
        var environment = ProcessInfo.processInfo.environment
        environment["PROPBUS_BUILD_DIR"] = BuildProducts.directory.path
        let result = try await runCommand(Self.packageRoot.appendingPathComponent("scripts/verify-units").path, [],
                                          environment: environment, timeout: 30)
        if result.status == 77 { throw XCTSkip("systemd-analyze is not installed: \(result.stderr)") }
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertTrue(result.stdout.contains("system unit: clean") && result.stdout.contains("user unit: clean"), "\(result)")
    }

    /// `scripts/install` with `PATH` leading to stand-ins for the tools a live install runs,
    /// which log their arguments to `calls` instead of changing this machine.
    private func runInstall(_ variables: [String: String], in directory: URL) async throws -> (CommandResult, calls: [String]) {
        let fakes = directory.appendingPathComponent("fake-bin")
        try FileManager.default.createDirectory(at: fakes, withIntermediateDirectories: true)
        let log = directory.appendingPathComponent("calls")
        for tool in ["systemd-sysusers", "systemd-tmpfiles", "systemctl"] {
            let path = fakes.appendingPathComponent(tool).path
            try "#!/bin/sh\necho \"\(tool) $*\" >> '\(log.path)'\n".write(toFile: path, atomically: true, encoding: .utf8)
            chmod(path, 0o755)
        }
        var environment = ProcessInfo.processInfo.environment
        environment["PATH"] = fakes.path + ":" + (environment["PATH"] ?? "/usr/bin:/bin")
        environment["PROPBUS_BUILD_DIR"] = BuildProducts.directory.path
        for name in ["PREFIX", "DESTDIR", "SYSCONFDIR"] { environment[name] = nil }
        environment.merge(variables) { $1 }
        let result = try await runCommand(Self.packageRoot.appendingPathComponent("scripts/install").path, [],
                                          environment: environment, timeout: 30)
        let calls = ((try? String(contentsOf: log, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        return (result, calls)
    }

    func testInstallIntoDestdirStagesTheTreeWithPathsRewrittenAndTouchesNothingElse() async throws {
        let directory = try makeTemporaryDirectory(prefix: "pbit-install")
        defer { try? FileManager.default.removeItem(at: directory) }
        let root = directory.appendingPathComponent("root").path
        let (result, calls) = try await runInstall(["DESTDIR": root, "PREFIX": "/opt/propbus"], in: directory)
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertEqual(calls, [], "a DESTDIR install ran tools on this machine")

        let expected: [(String, Int)] = [
            ("/opt/propbus/bin/propbusd", 0o755),
            ("/opt/propbus/bin/propctl", 0o755),
            ("/opt/propbus/lib/systemd/system/propbusd.service", 0o644),
            ("/opt/propbus/lib/systemd/user/propbusd.service", 0o644),
            ("/opt/propbus/share/dbus-1/system-services/org.propbus.PropBus1.service", 0o644),
            ("/opt/propbus/share/dbus-1/services/org.propbus.PropBus1.service", 0o644),
            // Not under PREFIX: the system bus reads policies from /usr/share or /etc only.
            ("/etc/dbus-1/system.d/org.propbus.PropBus1.conf", 0o644),
            ("/opt/propbus/lib/sysusers.d/propbus.conf", 0o644),
            ("/opt/propbus/lib/tmpfiles.d/propbus.conf", 0o644),
            ("/opt/propbus/share/doc/propbus/docs/install.md", 0o644),
            ("/opt/propbus/share/man/man1/propctl.1.gz", 0o644),
            ("/opt/propbus/share/man/man8/propbusd.8.gz", 0o644),
            ("/opt/propbus/share/bash-completion/completions/propctl", 0o644),
            ("/opt/propbus/share/zsh/site-functions/_propctl", 0o644),
            // fish reads PREFIX/share only when XDG_DATA_DIRS names it; SYSCONFDIR's always.
            ("/etc/fish/completions/propctl.fish", 0o644),
        ]
        for (path, mode) in expected {
            let attributes = try? FileManager.default.attributesOfItem(atPath: root + path)
            XCTAssertNotNil(attributes, "\(path) was not installed\n\(result.stdout)")
            XCTAssertEqual((attributes?[.posixPermissions] as? NSNumber)?.intValue, mode, path)
        }

        func read(_ path: String) throws -> String { try String(contentsOfFile: root + path, encoding: .utf8) }
        let system = try read("/opt/propbus/lib/systemd/system/propbusd.service")
        XCTAssertTrue(system.contains("\nExecStart=/opt/propbus/bin/propbusd --system\n"), system)
        XCTAssertTrue(system.contains("Documentation=man:propbusd(8) man:propctl(1) file:///opt/propbus/share/doc/propbus/docs/install.md"), system)
        let user = try read("/opt/propbus/lib/systemd/user/propbusd.service")
        XCTAssertTrue(user.contains("\nExecStart=/opt/propbus/bin/propbusd --session\n"), user)
        let systemActivation = try read("/opt/propbus/share/dbus-1/system-services/org.propbus.PropBus1.service")
        XCTAssertTrue(systemActivation.contains("\nExec=/opt/propbus/bin/propbusd --system\n"), systemActivation)
        XCTAssertTrue(systemActivation.contains("\nUser=propbus\n") && systemActivation.contains("\nSystemdService=propbusd.service\n"), systemActivation)
        let sessionActivation = try read("/opt/propbus/share/dbus-1/services/org.propbus.PropBus1.service")
        XCTAssertTrue(sessionActivation.contains("\nExec=/opt/propbus/bin/propbusd --session\n"), sessionActivation)
        XCTAssertTrue(sessionActivation.contains("\nSystemdService=propbusd.service\n"), sessionActivation)
        for text in [system, user, systemActivation, sessionActivation] {
            XCTAssertFalse(text.contains("/usr/bin/propbusd"), text)
        }
        // The installed binary is the built one, and runs.
        let version = try await runCommand(root + "/opt/propbus/bin/propbusd", ["--version"], environment: [:])
        XCTAssertEqual(version.status, 0, "\(version)")
    }

    func testInstallWithPrefixUsrPutsThePolicyUnderUsrShare() async throws {
        let directory = try makeTemporaryDirectory(prefix: "pbit-install")
        defer { try? FileManager.default.removeItem(at: directory) }
        let root = directory.appendingPathComponent("root").path
        let (result, calls) = try await runInstall(["DESTDIR": root, "PREFIX": "/usr"], in: directory)
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertEqual(calls, [])
        XCTAssertTrue(FileManager.default.fileExists(atPath: root + "/usr/share/dbus-1/system.d/org.propbus.PropBus1.conf"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: root + "/etc"), "PREFIX=/usr installs nothing in /etc")
        let unit = try String(contentsOfFile: root + "/usr/lib/systemd/system/propbusd.service", encoding: .utf8)
        XCTAssertTrue(unit.contains("\nExecStart=/usr/bin/propbusd --system\n"), unit)
    }

    /// Where each shell looks, asked of the shells themselves with no configuration of a user's
    /// (no XDG_DATA_DIRS, an empty home): the completions `scripts/install` puts in place must
    /// be there, for the default PREFIX and for a package's.
    func testInstalledCompletionsAreWhereDebiansShellsLookWithoutConfiguration() async throws {
        for tool in ["zsh", "fish"] where !FileManager.default.isExecutableFile(atPath: "/usr/bin/" + tool) {
            throw XCTSkip("\(tool) is not installed (scripts/setup installs it)")
        }
        let directory = try makeTemporaryDirectory(prefix: "pbit-install")
        defer { try? FileManager.default.removeItem(at: directory) }
        let bare = ["HOME": directory.path, "XDG_CONFIG_HOME": directory.appendingPathComponent("config").path, "PATH": "/usr/bin:/bin"]
        let zsh = try await runCommand("/usr/bin/zsh", ["-f", "-c", "print -rl -- $fpath"], environment: bare)
        let fish = try await runCommand("/usr/bin/fish", ["-c", #"printf "%s\n" $fish_complete_path"#], environment: bare)
        let zshLooks = zsh.stdout.split(separator: "\n").map(String.init), fishLooks = fish.stdout.split(separator: "\n").map(String.init)
        XCTAssertFalse(zshLooks.isEmpty || fishLooks.isEmpty, "\(zsh)\n\(fish)")
        // bash-completion looks in XDG_DATA_DIRS, by default /usr/local/share and /usr/share.
        let bashLooks = ["/usr/local/share/bash-completion/completions", "/usr/share/bash-completion/completions"]
        for prefix in ["/usr/local", "/usr"] {
            let root = directory.appendingPathComponent("root" + prefix.replacingOccurrences(of: "/", with: "-")).path
            let (result, _) = try await runInstall(["DESTDIR": root, "PREFIX": prefix], in: directory)
            XCTAssertEqual(result.status, 0, "\(result)")
            let installed = result.stdout.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            for (name, looks) in [("/propctl", bashLooks), ("/_propctl", zshLooks), ("/propctl.fish", fishLooks)] {
                let path = installed.first { $0.hasSuffix(name) && ($0.contains("completion") || $0.contains("site-functions")) }
                let file = try XCTUnwrap(path, "no \(name) installed with PREFIX=\(prefix): \(result.stdout)")
                XCTAssertTrue(FileManager.default.fileExists(atPath: root + file), file)
                XCTAssertTrue(looks.contains((file as NSString).deletingLastPathComponent),
                              "PREFIX=\(prefix): \(file) is not where the shell looks: \(looks)")
            }
        }
    }

    func testLiveInstallCreatesTheUserAndDirectoriesFromTheInstalledSnippets() async throws {
        let directory = try makeTemporaryDirectory(prefix: "pbit-install")
        defer { try? FileManager.default.removeItem(at: directory) }
        // No DESTDIR: a live install, into a PREFIX and SYSCONFDIR of the test's own.
        let prefix = directory.appendingPathComponent("prefix").path
        let (result, calls) = try await runInstall(["PREFIX": prefix, "SYSCONFDIR": directory.appendingPathComponent("etc").path],
                                                   in: directory)
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertTrue(FileManager.default.fileExists(atPath: prefix + "/bin/propbusd"))
        XCTAssertTrue(FileManager.default.fileExists(atPath: directory.path + "/etc/dbus-1/system.d/org.propbus.PropBus1.conf"))
        var expected = ["systemd-sysusers \(prefix)/lib/sysusers.d/propbus.conf",
                        "systemd-tmpfiles --create \(prefix)/lib/tmpfiles.d/propbus.conf"]
        // systemd is asked to reload only where it runs (not in this test's container, usually).
        if FileManager.default.fileExists(atPath: "/run/systemd/system") { expected.append("systemctl daemon-reload") }
        XCTAssertEqual(calls, expected, "\(result)")
    }
}
