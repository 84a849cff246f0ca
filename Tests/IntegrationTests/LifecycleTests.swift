import DBus
import XCTest

/// Starting, stopping and losing the bus, as systemd would see it.
final class LifecycleTests: DaemonTestCase {
    func testDaemonOwnsItsNameAndAnswersPing() async throws {
        let owned = try await client.nameHasOwner()
        XCTAssertTrue(owned)
        try await client.call(PropBusAPI.peer, "Ping")
        let version = try await client.call(PropBusAPI.properties, "Get", [.string(PropBusAPI.manager), .string("Version")])
        XCTAssertNotNil(version.first?.unwrappingVariant.stringValue)
    }

    func testSigtermExitsZeroAndReleasesTheName() async throws {
        let ownerChanges = try await client.connection.callBus("GetNameOwner", [.string(PropBusAPI.busName)])
        XCTAssertEqual(ownerChanges.count, 1)
        let ended = await daemon.terminate()
        XCTAssertEqual(ended, .exited(0), "stderr: \(daemon.stderr)")
        let owned = try await client.nameHasOwner()
        XCTAssertFalse(owned)
    }

    /// A SIGTERM that comes while the daemon is still starting, before its signal sources are
    /// registered (here: while it reads and checks a model file of 10,000 properties), waits
    /// until they are and then shuts the daemon down: exit 0, never death by the signal. The same
    /// window, narrower, is the one a SIGTERM right after the name is owned can fall into while
    /// libdispatch's manager thread has not yet registered the sources (a loaded machine).
    func testSigtermDuringStartUpExitsZero() async throws {
        await daemon.stop()  // this test starts its own
        let groups = (0..<100).map { group in
            let properties = (0..<100).map { #""p\#($0)": {"type": "i", "default": \#($0)}"# }.joined(separator: ", ")
            return #""g\#(group)": {"properties": {\#(properties)}}"#
        }
        let model = bus.directory.appendingPathComponent("big.json")
        try #"{"groups": {\#(groups.joined(separator: ", "))}}"#.write(to: model, atomically: true, encoding: .utf8)
        let starting = try ChildProcess(BuildProducts.propbusd, ["--address", bus.address, "--in-memory", "--model", model.path],
                                        environment: bus.environment)
        defer { starting.signal(SIGKILL) }
        // Its first step's line: main's first lines have run, the model file's step is next.
        let started = await eventually(timeout: 30) { starting.stderr.contains("lifecycle: starting") || !starting.isRunning }
        XCTAssertTrue(started, "stderr: \(starting.stderr)")
        starting.signal(SIGTERM)
        let ended = await starting.waitForExit(timeout: 60)
        XCTAssertEqual(ended, .exited(0), "stderr: \(starting.stderr)")
        XCTAssertTrue(starting.stderr.contains("propbusd: stopping"), "stderr: \(starting.stderr)")
    }

    /// The daemon's pieces start in order and stop in reverse order, READY=1's "ready" line after
    /// the last start and "stopping" (said with STOPPING=1) before the first stop.
    func testComponentsStartInOrderAndStopInReverseOrder() async throws {
        let process = daemon.process
        let ended = await daemon.terminate()
        XCTAssertEqual(ended, .exited(0), "stderr: \(daemon.stderr)")
        let lines = process.stderr.split(separator: "\n").map(String.init)
        func steps(_ verb: String) -> [String] {
            lines.compactMap { line in
                let prefix = "propbusd: lifecycle: \(verb) "
                return line.hasPrefix(prefix) ? String(line.dropFirst(prefix.count)) : nil
            }
        }
        let order = ["state directory lock", "store", "model files", "signal handlers", "bus connection", "bus name",
                     "start-up commit", "fleet", "renders", "serving"]
        XCTAssertEqual(steps("starting"), order, "\(lines)")
        XCTAssertEqual(steps("stopping"), order.reversed(), "\(lines)")
        let ready = lines.firstIndex { $0.hasPrefix("propbusd: ready:") }
        let lastStart = lines.firstIndex(of: "propbusd: lifecycle: starting serving")
        let stopping = lines.firstIndex(of: "propbusd: stopping")
        let firstStop = lines.firstIndex(of: "propbusd: lifecycle: stopping serving")
        XCTAssertTrue(lastStart != nil && ready != nil && lastStart! < ready!, "\(lines)")
        XCTAssertTrue(stopping != nil && firstStop != nil && stopping! < firstStop!, "\(lines)")
        XCTAssertEqual(lines.last, "propbusd: stopped", "\(lines)")
    }

    func testSigintExitsZero() async throws {
        daemon.process.signal(SIGINT)
        let ended = await daemon.process.waitForExit(timeout: 10)
        XCTAssertEqual(ended, .exited(0), "stderr: \(daemon.stderr)")
    }

    func testNameIsReleasedBeforeTheConnectionCloses() async throws {
        // NameOwnerChanged(name, old, "") must arrive; a subscriber can restart on it.
        let rule = MatchRule(sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                             arg0: PropBusAPI.busName)
        let recorder = SignalRecorder()
        client.connection.queue.sync {
            _ = client.connection.addSignalHandler(matching: rule) { recorder.append(ReceivedSignal($0)) }
        }
        try await client.connection.addMatch(rule)
        _ = await daemon.terminate()
        let signals = await recorder.wait(count: 1)
        XCTAssertEqual(signals.first?.arguments.last, .string(""), "\(signals)")
    }

    func testLosingTheBusMakesTheDaemonExitNonZero() async throws {
        client.close()
        await bus.crash()
        let ended = await daemon.process.waitForExit(timeout: 10)
        XCTAssertNotNil(ended, "propbusd still runs after its bus died")
        XCTAssertNotEqual(ended, .exited(0), "stderr: \(daemon.stderr)")
        XCTAssertEqual(ended?.bySignal, false, "propbusd crashed instead of exiting: \(ended.map(\.description) ?? "") \(daemon.stderr)")
        XCTAssertTrue(daemon.stderr.contains("bus"), "stderr should say why: \(daemon.stderr)")
    }

    func testSecondDaemonOnTheSameBusRefusesToStartAndExitsNonZero() async throws {
        // A store of its own: the same one would be refused by its lock first (StoreLockTests).
        var environment = bus.environment
        environment["STATE_DIRECTORY"] = bus.directory.appendingPathComponent("second-state").path
        let second = try ChildProcess(BuildProducts.propbusd, ["--address", bus.address], environment: environment)
        let ended = await second.waitForExit(timeout: 10)
        XCTAssertEqual(ended?.bySignal, false)
        XCTAssertNotEqual(ended?.status, 0, "\(second.stderr)")
        XCTAssertTrue(second.stderr.contains(PropBusAPI.busName), second.stderr)
        // The first one is undisturbed.
        try await client.call(PropBusAPI.peer, "Ping")
    }

    func testUnreachableBusExitsNonZeroWithAMessage() async throws {
        let result = try await runCommand(BuildProducts.propbusd, ["--address", "unix:path=\(bus.directory.path)/nothing-here"],
                                          environment: bus.environment)
        XCTAssertFalse(result.timedOut)
        XCTAssertNotEqual(result.status, 0, "\(result)")
        XCTAssertFalse(result.stderr.isEmpty)
    }
}

/// What propbusd answers before it connects: its command line, with no bus and no daemon to start.
final class DaemonCommandLineTests: XCTestCase {
    func testUnknownOptionIsAUsageErrorWith64() async throws {
        let result = try await runCommand(BuildProducts.propbusd, ["--no-such-option"], environment: PrivateBus.isolatedEnvironment(address: nil))
        XCTAssertEqual(result.status, 64, "\(result)")
        XCTAssertTrue(result.stderr.contains("--no-such-option"), result.stderr)
    }

    func testHelpListsTheOptions() async throws {
        let result = try await runCommand(BuildProducts.propbusd, ["--help"], environment: PrivateBus.isolatedEnvironment(address: nil))
        XCTAssertEqual(result.status, 0, "\(result)")
        for option in ["--address", "--system", "--session", "--max-value-size", "--max-message-size", "--max-properties"] {
            XCTAssertTrue(result.stdout.contains(option), "--help lacks \(option):\n\(result.stdout)")
        }
    }
}
