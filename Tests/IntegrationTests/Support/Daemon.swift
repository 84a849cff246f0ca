import DBus
import Foundation
import XCTest

/// Where `swift build` put the project's executables.
enum BuildProducts {
    /// The directory holding `propbusd` and `propctl`: `$PROPBUS_BUILD_DIR`, else the directory
    /// of the test bundle, else `<package>/.build/debug`.
    static let directory: URL = {
        var candidates: [URL] = []
        if let override = ProcessInfo.processInfo.environment["PROPBUS_BUILD_DIR"] {
            candidates.append(URL(fileURLWithPath: override))
        }
        candidates.append(Bundle.main.bundleURL)
        candidates.append(Bundle.main.bundleURL.deletingLastPathComponent())
        if let executable = Bundle.main.executableURL { candidates.append(executable.deletingLastPathComponent()) }
        // Tests/IntegrationTests/Support/Daemon.swift → the package root is three levels up.
        let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        candidates.append(packageRoot.appendingPathComponent(".build/debug"))
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0.appendingPathComponent("propbusd").path) }
            ?? packageRoot.appendingPathComponent(".build/debug")
    }()

    static var propbusd: String { directory.appendingPathComponent("propbusd").path }
    static var propctl: String { directory.appendingPathComponent("propctl").path }
}

/// The real `propbusd` binary, serving on a private bus.
final class Daemon: @unchecked Sendable {
    let process: ChildProcess
    let bus: PrivateBus

    private init(process: ChildProcess, bus: PrivateBus) {
        self.process = process
        self.bus = bus
    }

    /// Starts `propbusd --address <bus> <arguments>` and waits until it owns its name.
    static func start(on bus: PrivateBus, arguments: [String] = [], watcher: Client) async throws -> Daemon {
        let process = try ChildProcess(BuildProducts.propbusd, ["--address", bus.address] + arguments,
                                       environment: bus.environment)
        let daemon = Daemon(process: process, bus: bus)
        var owned = false
        _ = await eventually(timeout: 15) {
            owned = (try? await watcher.nameHasOwner()) ?? false
            return owned || !process.isRunning
        }
        guard owned else {
            await process.stop()
            throw TestSetupError("propbusd did not own \(PropBusAPI.busName) (\(process.termination?.description ?? "still running")); stderr: \(process.stderr)")
        }
        return daemon
    }

    /// What the daemon printed on stderr so far.
    var stderr: String { process.stderr }

    /// Sends SIGTERM and waits for the daemon to exit; `nil` if it does not within `timeout`.
    func terminate(timeout: TimeInterval = 10) async -> Termination? {
        process.signal(SIGTERM)
        return await process.waitForExit(timeout: timeout)
    }

    /// Makes sure the daemon is gone, killing it if it ignores SIGTERM.
    func stop() async {
        await process.stop()
    }
}

/// A test case with a fresh private bus, a fresh `propbusd` and a client connection per test.
/// Starting all three costs tens of milliseconds, so every test gets its own world.
class DaemonTestCase: XCTestCase {
    var bus: PrivateBus!
    var daemon: Daemon!
    var client: Client!

    /// Extra `propbusd` options for every test of a class.
    var daemonArguments: [String] { [] }

    /// The kind of private bus every test of a class runs on.
    var busKind: PrivateBus.Kind { .session }

    /// The session bus's `max_message_size` for every test of a class; the bus's default if nil.
    var busMaxMessageSize: Int? { nil }

    /// More `<limit>`s of the bus (`max_incoming_bytes`, …) for every test of a class.
    var busLimits: [String: Int] { [:] }

    override func setUp() async throws {
        try await super.setUp()
        bus = try await PrivateBus.start(busKind, maxMessageSize: busMaxMessageSize, limits: busLimits)
        client = try await Client.connect(to: bus)
        daemon = try await Daemon.start(on: bus, arguments: daemonArguments, watcher: client)
    }

    override func tearDown() async throws {
        // A daemon that died of a signal during the test crashed: say so, with what it printed.
        if let ended = daemon?.process.termination, ended.bySignal {
            XCTFail("propbusd \(ended) during the test; stderr:\n\(daemon.stderr)")
        }
        client?.close()
        await daemon?.stop()
        await bus?.stop()
        client = nil
        daemon = nil
        bus = nil
        try await super.tearDown()
    }

    /// Restarts `propbusd` with other options on the same bus.
    func restartDaemon(arguments: [String]) async throws {
        await daemon.stop()
        _ = await eventually { !((try? await client.nameHasOwner()) ?? true) }
        daemon = try await Daemon.start(on: bus, arguments: arguments, watcher: client)
    }

    /// Runs a tool with the private bus as its only bus.
    func tool(_ executable: String, _ arguments: [String], timeout: TimeInterval = 10) async throws -> CommandResult {
        try await runCommand(executable, arguments, environment: bus.environment, timeout: timeout)
    }

    /// `busctl --address=<bus> -- …` (the `--` lets values such as `-1234` through)
    func busctl(_ arguments: [String], timeout: TimeInterval = 10) async throws -> CommandResult {
        try await tool("busctl", ["--address=\(bus.address)", "--"] + arguments, timeout: timeout)
    }

    /// `dbus-send --bus=<bus> --print-reply --dest=org.propbus.PropBus1 …`
    /// (`--address` would be `--peer`: no Hello, and the bus answers NoReply.)
    func dbusSend(_ arguments: [String], timeout: TimeInterval = 10) async throws -> CommandResult {
        try await tool("dbus-send", ["--bus=\(bus.address)", "--print-reply", "--reply-timeout=5000",
                                     "--dest=\(PropBusAPI.busName)"] + arguments, timeout: timeout)
    }

    /// `gdbus call --address <bus> --dest org.propbus.PropBus1 --object-path PATH --method M ARGS…`
    /// with a short overall timeout: gdbus introspects first and stalls 3 s on a service that
    /// does not answer, which this turns into a failure.
    func gdbusCall(_ path: String, _ method: String, _ arguments: [String], timeout: TimeInterval = 2.5) async throws -> CommandResult {
        try await tool("gdbus", ["call", "--address", bus.address, "--dest", PropBusAPI.busName,
                                 "--object-path", path, "--method", method, "--timeout", "5"] + arguments,
                       timeout: timeout)
    }
}
