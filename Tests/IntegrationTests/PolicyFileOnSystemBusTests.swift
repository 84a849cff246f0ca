import DBus
import Foundation
import XCTest

/// `systemd/org.propbus.PropBus1.conf` on a bus with the system bus's default policy (no name
/// may be owned, no method call sent, unless a policy file punches a hole).
///
/// The `propbus` user does not exist here, so the policy is included with `user="propbus"` read
/// as `user="root"`: root stands for the service, `nobody` for everyone else. Needs root (to run
/// as `nobody`); skipped otherwise.
final class PolicyFileOnSystemBusTests: XCTestCase {
    private var directory: URL!
    private var busProcess: ChildProcess!
    private var address = ""
    private var daemon: ChildProcess?

    override func setUp() async throws {
        try await super.setUp()
        guard getuid() == 0 else { throw XCTSkip("needs root, to run clients as nobody") }
        directory = try makeTemporaryDirectory(prefix: "pbit-sys")
        // nobody must reach the socket.
        chmod(directory.path, 0o755)
        let policy = try String(contentsOf: PrivateBus.policyFile, encoding: .utf8)
        XCTAssertTrue(policy.contains("<policy user=\"propbus\">"), policy)
        let policyURL = directory.appendingPathComponent("org.propbus.PropBus1.conf")
        try policy.replacingOccurrences(of: "<policy user=\"propbus\">", with: "<policy user=\"root\">")
            .write(to: policyURL, atomically: true, encoding: .utf8)
        // The default policy of /usr/share/dbus-1/system.conf, which every system.d file amends;
        // root owns the name only through the rewritten policy file.
        let configURL = directory.appendingPathComponent("bus.conf")
        try PrivateBus.systemConfiguration(socketPath: directory.appendingPathComponent("bus").path, policy: policyURL, rootOwnsName: false)
            .write(to: configURL, atomically: true, encoding: .utf8)
        (busProcess, address) = try await PrivateBus.launch(configURL, environment: PrivateBus.isolatedEnvironment(address: nil), directory: directory)
    }

    override func tearDown() async throws {
        await daemon?.stop()
        await busProcess?.stop()
        if let directory { try? FileManager.default.removeItem(at: directory) }
        try await super.tearDown()
    }

    private var environment: [String: String] { PrivateBus.isolatedEnvironment(address: address) }

    /// Runs `arguments` as `nobody`.
    private func asNobody(_ arguments: [String], timeout: TimeInterval = 10) async throws -> CommandResult {
        try await AsNobody.run(arguments[0], Array(arguments.dropFirst()), environment: environment, timeout: timeout)
    }

    func testOnlyThePolicyUserMayOwnTheNameAndEveryoneMayCallIt() async throws {
        let intruder = try await asNobody([BuildProducts.propbusd, "--address", address, "--in-memory"])
        XCTAssertNotEqual(intruder.status, 0, "nobody owned \(PropBusAPI.busName): \(intruder)")
        XCTAssertTrue(intruder.stderr.contains("AccessDenied"), intruder.stderr)

        let process = try ChildProcess(BuildProducts.propbusd, ["--address", address, "--in-memory"], environment: environment)
        daemon = process
        let watcher = try await Connection.connect(to: .address(address))
        defer { watcher.close() }
        let owned = await eventually(timeout: 10) {
            let reply = try? await watcher.callBus("NameHasOwner", [.string(PropBusAPI.busName)])
            return reply?.first?.boolValue == true || !process.isRunning
        }
        XCTAssertTrue(owned && process.isRunning, "the policy user could not own the name: \(process.stderr)")

        let read = try await asNobody(["busctl", "--address=\(address)", "get-property", PropBusAPI.busName,
                                       PropBusAPI.rootPath, PropBusAPI.manager, "Version"])
        XCTAssertEqual(read.status, 0, "\(read)")
        // Any other call reaches the daemon (which does the fine-grained checks): an unknown
        // method gets the daemon's UnknownMethod, not the bus's AccessDenied.
        let call = try await asNobody(["busctl", "--address=\(address)", "call", PropBusAPI.busName,
                                       PropBusAPI.rootPath, PropBusAPI.manager, "NoSuchMethod"])
        XCTAssertNotEqual(call.status, 0)
        XCTAssertFalse(call.stderr.contains("Rejected send message"), "the bus refused the call: \(call)")
        XCTAssertTrue(call.stderr.contains("No such method 'NoSuchMethod'"), "\(call)")
    }
}
