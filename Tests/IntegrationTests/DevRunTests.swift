import Foundation
import XCTest

/// `scripts/run` is isolated by default: its own private bus and state directory, printed, so
/// that a tour never touches the user's session bus or `~/.local/state/propbus`;
/// `--session-bus` opts into the real ones.
final class DevRunTests: XCTestCase {
    private static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    private var bus: PrivateBus!
    private var client: Client!
    private var home: URL!

    override func setUp() async throws {
        try await super.setUp()
        // The test's bus plays the user's session bus.
        bus = try await PrivateBus.start(.session)
        client = try await Client.connect(to: bus)
        home = try makeTemporaryDirectory(prefix: "pbit-devrun")
    }

    override func tearDown() async throws {
        _ = try? await devRun(["--stop"])
        client?.close()
        if let home { try? FileManager.default.removeItem(at: home) }
        try await super.tearDown()
    }

    private func devRun(_ arguments: [String]) async throws -> CommandResult {
        var environment = bus.environment
        environment["XDG_RUNTIME_DIR"] = home.appendingPathComponent("runtime").path
        environment["XDG_STATE_HOME"] = home.appendingPathComponent("state").path
        environment["XDG_CONFIG_HOME"] = home.appendingPathComponent("config").path
        environment["HOME"] = home.path
        environment["PROPBUS_BUILD_DIR"] = BuildProducts.directory.path
        environment["STATE_DIRECTORY"] = nil   // it would win over the state directory under test
        try FileManager.default.createDirectory(at: home.appendingPathComponent("runtime"), withIntermediateDirectories: true)
        return try await runCommand(Self.packageRoot.appendingPathComponent("scripts/run").path, arguments,
                                    environment: environment, timeout: 60)
    }

    func testByDefaultTheDaemonRunsOnAPrivateBusWithAPrivateStateDirectory() async throws {
        let run = try await devRun(["--background"])
        XCTAssertEqual(run.status, 0, "\(run)")
        let dev = home.appendingPathComponent("runtime/propbus-dev")
        XCTAssertTrue(run.stdout.contains("unix:path=\(dev.path)/bus"), run.stdout)
        XCTAssertTrue(run.stdout.contains("state directory \(dev.path)/state"), run.stdout)
        let onSessionBus = try await client.nameHasOwner()
        XCTAssertFalse(onSessionBus, "the session bus was used")
        let status = try await runCommand(BuildProducts.propctl, ["--address", "unix:path=\(dev.path)/bus", "status"],
                                          environment: bus.environment)
        XCTAssertEqual(status.status, 0, "\(status)")
        let stored = (try? FileManager.default.contentsOfDirectory(atPath: dev.path + "/state")) ?? []
        XCTAssertTrue(stored.contains("propbus.db"), "\(stored) \(run)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: home.path + "/state/propbus"), "the user's state directory was touched")
    }

    func testSessionBusFlagUsesTheRealSessionBus() async throws {
        let run = try await devRun(["--session-bus", "--background"])
        XCTAssertEqual(run.status, 0, "\(run)")
        let owned = try await client.nameHasOwner()
        XCTAssertTrue(owned, "\(run)")
    }
}
