import DBus
import Foundation
import XCTest

/// Smaller ways state went wrong. Commands survive a missing predicate key,
/// persistent bindings have no owner and are not duplicated, a clean stop checkpoints the WAL,
/// a foreign SQLite file is refused, and a full disk is not called corruption.
final class StoreStateTests: DaemonTestCase, @unchecked Sendable {
    private var stateDirectory: URL { bus.directory.appendingPathComponent("state") }
    private var storePath: String { stateDirectory.appendingPathComponent("propbus.db").path }

    private func enabled(_ command: String) async throws -> DBusValue? {
        try await client.call(at: PropBusAPI.rootPath + "/" + command.replacingOccurrences(of: ".", with: "/"), PropBusAPI.properties, "Get",
                              [.string("org.propbus.PropBus1.Command"), .string("Enabled")]).first?.unwrappingVariantOnce
    }

    func testCommandWhosePredicateReadsADeletedKeySurvivesRestartsDisabled() async throws {
        try await client.create("gate.open", "b", default: .boolean(true))
        try await client.call(PropBusAPI.manager, "CreateCommand", [.string("vm.run"), .vardict([
            "exec": .variant(.array(of: .string, [.string("true")])), "enabled_when": .variant(.string("gate.open")),
            "persistent": .variant(.boolean(true)),
        ])])
        try await client.delete("gate.open")
        let whileRunning = try await enabled("vm.run")
        XCTAssertEqual(whileRunning, .boolean(false))
        try await restartDaemon(arguments: [])
        let afterRestart = try await enabled("vm.run")
        XCTAssertEqual(afterRestart, .boolean(false), "the command is still there, disabled: \(daemon.stderr)")
        try await client.create("gate.open", "b", default: .boolean(true))
        let back = try await enabled("vm.run")
        XCTAssertEqual(back, .boolean(true), "it follows its predicate again once the key exists")
    }

    func testPersistentBindingHasNoOwnerAndBindingItAgainReturnsTheSamePath() async throws {
        try await client.create("a.x", "i", default: .int32(1))
        try await client.create("a.y", "i", default: .int32(2))
        let options = DBusValue.vardict(["persistent": .variant(.boolean(true))])
        let first = try await client.call(PropBusAPI.manager, "Bind", [.string("a.x"), .string("a.y"), options]).first
        let second = try await client.call(PropBusAPI.manager, "Bind", [.string("a.x"), .string("a.y"), options]).first
        XCTAssertEqual(first, second, "an identical persistent binding is not made twice")
        guard case .objectPath(let path)? = first else { return XCTFail("\(String(describing: first))") }
        let owner = try await client.call(at: path, PropBusAPI.properties, "Get", [.string("org.propbus.PropBus1.Binding"), .string("Owner")]).first
        XCTAssertEqual(owner, .variant(.string("")))
        let listed = try await client.call(PropBusAPI.manager, "ListBindings")
        guard case .array(_, let rows)? = listed.first else { return XCTFail("\(listed)") }
        XCTAssertEqual(rows.count, 1)
        if case .structure(let fields)? = rows.first { XCTAssertNil(fields[3].stringKeyedEntries?["owner"], "\(fields)") }
    }

    func testADaemonThatCannotOwnTheNameCreatesNoStore() async throws {
        let fresh = bus.directory.appendingPathComponent("fresh-state")
        var environment = bus.environment
        environment["STATE_DIRECTORY"] = fresh.path
        let result = try await runCommand(BuildProducts.propbusd, ["--address", bus.address], environment: environment, timeout: 15)
        XCTAssertEqual(result.status, 1, "\(result)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: fresh.appendingPathComponent("propbus.db").path),
                       "a daemon that never owned the name created a store")
    }

    func testCleanShutdownCheckpointsTheWAL() async throws {
        try await client.create("a.x", "i", default: .int32(1))
        for value in 1...20 { try await client.set("a.x", .int32(Int32(value))) }
        _ = await daemon.terminate()
        let attributes = try? FileManager.default.attributesOfItem(atPath: storePath + "-wal")
        let size = (attributes?[.size] as? NSNumber)?.intValue ?? 0
        XCTAssertEqual(size, 0, "the WAL was left with \(size) bytes")
        XCTAssertTrue(daemon.stderr.contains("stopped"), daemon.stderr)
    }

    func testAnotherApplicationsSQLiteFileIsRefusedAndLeftAlone() async throws {
        await daemon.stop()
        _ = await eventually { !((try? await client.nameHasOwner()) ?? true) }
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: storePath + suffix) }
        let made = try await runCommand("sqlite3", [storePath, "CREATE TABLE contacts (name TEXT); INSERT INTO contacts VALUES ('ada');"], environment: [:])
        XCTAssertTrue(made.succeeded, "\(made)")
        let before = try Data(contentsOf: URL(fileURLWithPath: storePath))
        let result = try await tool(BuildProducts.propbusd, ["--address", bus.address], timeout: 15)
        XCTAssertEqual(result.status, 1, "\(result)")
        XCTAssertTrue(result.stderr.contains("not a propbus store"), result.stderr)
        XCTAssertFalse(result.stderr.contains("--recover"), "another application's file is not damage: \(result.stderr)")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: storePath)), before)
        // The foreign file's own identity is respected too.
        let tagged = try await runCommand("sqlite3", [storePath, "PRAGMA application_id = 42;"], environment: [:])
        XCTAssertTrue(tagged.succeeded, "\(tagged)")
        let refused = try await tool(BuildProducts.propbusd, ["--address", bus.address], timeout: 15)
        XCTAssertTrue(refused.stderr.contains("application_id 42"), refused.stderr)
        daemon = nil
    }

    func testAFullDiskAtStartIsReportedAsSuchAndDoesNotSuggestRecover() async throws {
        guard geteuid() == 0 else { throw XCTSkip("needs root to mount a small tmpfs as the state directory") }
        await daemon.stop()
        _ = await eventually { !((try? await client.nameHasOwner()) ?? true) }
        let empty = bus.directory.appendingPathComponent("full")
        try FileManager.default.createDirectory(at: empty, withIntermediateDirectories: true)
        let mount = try await runCommand("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", empty.path], environment: [:])
        guard mount.succeeded else { throw XCTSkip("cannot mount a tmpfs: \(mount)") }
        addTeardownBlock { _ = try? await runCommand("umount", ["-l", empty.path], environment: [:]) }
        _ = try await runCommand("dd", ["if=/dev/zero", "of=\(empty.path)/filler", "bs=64k"], environment: [:], timeout: 30)
        var environment = bus.environment
        environment["STATE_DIRECTORY"] = empty.path
        // A new store is created once the name is owned; a model file gives it something to write.
        let model = bus.directory.appendingPathComponent("m.json")
        try #"{"groups": {"a": {"properties": {"x": {"type": "i"}}}}}"#.write(to: model, atomically: true, encoding: .utf8)
        let result = try await runCommand(BuildProducts.propbusd, ["--address", bus.address, "--model", model.path],
                                          environment: environment, timeout: 15)
        XCTAssertEqual(result.status, 1, "\(result)")
        XCTAssertTrue(result.stderr.contains("full"), result.stderr)
        XCTAssertFalse(result.stderr.contains("corrupt"), result.stderr)
        XCTAssertFalse(result.stderr.contains("--recover"), result.stderr)
        daemon = nil
    }
}
