import DBus
import Foundation
import XCTest

/// One daemon per state directory (a lock), and nothing written to the store
/// before the bus name is owned.
final class StoreLockTests: DaemonTestCase, @unchecked Sendable {
    private var stateDirectory: URL { bus.directory.appendingPathComponent("state") }

    /// The bytes of the store's database and WAL (a missing file reads as empty).
    private func storeBytes(in directory: URL) -> [Data] {
        ["propbus.db", "propbus.db-wal"].map { (try? Data(contentsOf: directory.appendingPathComponent($0))) ?? Data() }
    }

    /// Starts a second propbusd on another bus with this test's state directory: it must be
    /// refused, naming the directory and the holder's pid, and leave the store as it was.
    private func assertASecondDaemonOnAnotherBusIsRefused(file: StaticString = #filePath, line: UInt = #line) async throws {
        let before = storeBytes(in: stateDirectory)
        let other = try await PrivateBus.start()
        defer { Task { await other.stop() } }
        var environment = other.environment
        environment["STATE_DIRECTORY"] = stateDirectory.path
        let result = try await runCommand(BuildProducts.propbusd, ["--address", other.address], environment: environment, timeout: 15)
        XCTAssertNotNil(result.termination, "the second daemon must not run: \(result)", file: file, line: line)
        XCTAssertNotEqual(result.termination, .exited(0), "\(result)", file: file, line: line)
        XCTAssertTrue(result.stderr.contains("pid \(daemon.process.pid)"), "names the holder's pid: \(result.stderr)", file: file, line: line)
        XCTAssertTrue(result.stderr.contains(stateDirectory.path), "names the directory: \(result.stderr)", file: file, line: line)
        XCTAssertEqual(storeBytes(in: stateDirectory), before, "the loser left the store untouched", file: file, line: line)
    }

    func testSecondDaemonOnAnotherBusRefusesTheLockedStateDirectoryNamingTheHolder() async throws {
        try await client.create("lock.a", "i", default: .int32(1))
        try await client.set("lock.a", .int32(7))
        try await assertASecondDaemonOnAnotherBusIsRefused()
        let value = try await client.get("lock.a")
        XCTAssertEqual(value, .int32(7))
    }

    /// The lock held a file that anyone who may write the directory can
    /// unlink; a second daemon then made a new one, locked it and served the same store.
    func testSecondDaemonRefusesTheStateDirectoryEvenWhenTheLockFileWasRemoved() async throws {
        try await client.create("lock.a", "i", default: .int32(1))
        try await client.set("lock.a", .int32(7))
        try FileManager.default.removeItem(at: stateDirectory.appendingPathComponent("propbusd.lock"))
        try await assertASecondDaemonOnAnotherBusIsRefused()
        try await client.set("lock.a", .int32(8))
        let value = try await client.get("lock.a")
        XCTAssertEqual(value, .int32(8), "the first daemon still serves")
    }

    func testSecondDaemonOnTheSameBusAndStateDirectoryRefusesTheLock() async throws {
        try await client.create("lock.a", "i", default: .int32(1))
        let before = storeBytes(in: stateDirectory)
        let result = try await tool(BuildProducts.propbusd, ["--address", bus.address], timeout: 15)
        XCTAssertNotEqual(result.termination, .exited(0), "\(result)")
        XCTAssertTrue(result.stderr.contains("pid \(daemon.process.pid)"), "\(result.stderr)")
        XCTAssertEqual(storeBytes(in: stateDirectory), before)
    }

    func testDaemonThatCannotOwnTheNameWritesNothingToItsStore() async throws {
        // A store of its own, made by a daemon on another bus that has stopped since.
        let other = try await PrivateBus.start()
        defer { Task { await other.stop() } }
        let otherClient = try await Client.connect(to: other)
        let otherDaemon = try await Daemon.start(on: other, watcher: otherClient)
        try await otherClient.create("mine.a", "i", default: .int32(1))
        try await otherClient.set("mine.a", .int32(3))
        try await otherClient.create("mine.b", "i", default: .int32(0))
        try await otherClient.call(PropBusAPI.manager, "Bind", [.string("mine.b"), .string("mine.a"), .vardict(["persistent": .variant(.boolean(true))])])
        try await otherClient.set("mine.a", .int32(4))
        _ = await otherDaemon.terminate()
        otherClient.close()
        let otherState = other.directory.appendingPathComponent("state")
        let before = storeBytes(in: otherState)

        // Now on this bus, whose name is owned, with a model file that declares more.
        let model = bus.directory.appendingPathComponent("extra.json")
        try #"{"groups": {"mine": {"properties": {"c": {"type": "s", "default": "x"}, "a": {"type": "i", "default": 9}}}}}"#
            .write(to: model, atomically: true, encoding: .utf8)
        var environment = bus.environment
        environment["STATE_DIRECTORY"] = otherState.path
        let result = try await runCommand(BuildProducts.propbusd, ["--address", bus.address, "--model", model.path],
                                          environment: environment, timeout: 15)
        XCTAssertEqual(result.termination, .exited(1), "\(result)")
        XCTAssertTrue(result.stderr.contains("already owned"), "\(result.stderr)")
        XCTAssertEqual(storeBytes(in: otherState), before, "a daemon that did not own the name wrote to its store")
    }

    /// An administrator's `propbusd --system` as root, refused the name, must leave nothing in
    /// the service user's state directory that keeps the service out.
    func testADaemonRunAsRootLeavesNothingThatKeepsTheServiceUserOut() async throws {
        guard getuid() == 0 else { throw XCTSkip("needs root, to run the daemon as nobody") }
        let state = try makeTemporaryDirectory(prefix: "pbit-state")
        defer { try? FileManager.default.removeItem(at: state) }
        XCTAssertEqual(chown(state.path, AsNobody.uid, AsNobody.uid), 0)
        XCTAssertEqual(chmod(state.path, 0o750), 0)
        // A system bus on which nobody stands for the service's user.
        let other = try await PrivateBus.start(.system, serviceUser: "nobody")
        defer { Task { await other.stop() } }
        let otherClient = try await Client.connect(to: other)
        defer { otherClient.close() }
        func startAsNobody() async throws -> ChildProcess {
            let (program, argv) = try AsNobody.command(BuildProducts.propbusd, ["--address", other.address, "--system-access"])
            var environment = other.environment
            environment["STATE_DIRECTORY"] = state.path
            let service = try ChildProcess(program, argv, environment: environment)
            let owned = await eventually(timeout: 20) { (try? await otherClient.nameHasOwner()) == true }
            XCTAssertTrue(owned, "the service user's daemon did not start: \(service.stderr)")
            return service
        }
        // A fresh install: the directory is the service user's and empty. Root's daemon takes
        // its lock, then is refused the name this test's daemon owns.
        var environment = bus.environment
        environment["STATE_DIRECTORY"] = state.path
        let root = try await runCommand(BuildProducts.propbusd, ["--address", bus.address], environment: environment, timeout: 15)
        XCTAssertEqual(root.termination, .exited(1), "\(root)")
        let rootOwned = try FileManager.default.contentsOfDirectory(atPath: state.path).filter { name in
            var info = stat()
            return stat(state.appendingPathComponent(name).path, &info) == 0 && info.st_uid == 0
        }
        XCTAssertEqual(rootOwned, [], "root's daemon left files only root may write")

        let service = try await startAsNobody()
        try await otherClient.create("kept.a", "i", default: .int32(1))
        _ = await service.stop(timeout: 10)
    }

    func testLockIsReleasedWhenTheDaemonStops() async throws {
        try await client.create("lock.a", "i", default: .int32(1))
        try await restartDaemon(arguments: [])
        let value = try await client.get("lock.a")
        XCTAssertEqual(value, .int32(1))
    }
}
