import DBus
import Foundation
import XCTest

/// `propctl lock` and `unlock` (`Manager.Lock`, `Unlock`): the daemon keeps the locks in
/// `mandatory.d/50-propctl.json`, written durably and under a lock, and applies just that
/// file's change with the caller as its origin.
final class LockTests: DaemonTestCase, @unchecked Sendable {
    override var daemonArguments: [String] { layerDirectoryArguments }

    private var managedFile: String { configDirectory.appendingPathComponent("mandatory.d/50-propctl.json").path }

    private func propctlHere(_ arguments: [String], timeout: TimeInterval = 15) async throws -> CommandResult {
        try await tool(BuildProducts.propctl, ["--address", bus.address] + arguments, timeout: timeout)
    }

    private func historyRows(_ key: String) async throws -> [[String: Any]] {
        let result = try await propctlHere(["--json", "history", key])
        XCTAssertEqual(result.status, 0, "\(result)")
        return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]], result.stdout)
    }

    func testALockAndAnUnlockAreTheCallersChangesInHistoryAndWatch() async throws {
        // A vendor default below: the unlock falls back to it, and must not be blamed on it.
        try writeLayerFile(vendorDirectory, "defaults.d", "10-vendor.json", #"{"app.volume": 5}"#)
        try await client.create("app.volume", "i", default: .int32(50))
        let reload = try await propctlHere(["reload"])
        XCTAssertEqual(reload.status, 0, "\(reload)")
        let watch = try ChildProcess(BuildProducts.propctl, ["--address", bus.address, "watch", "app", "--origin"], environment: bus.environment)
        defer { watch.signal(SIGKILL) }
        _ = await eventually { watch.stdout.contains("app.volume 5") }
        let lock = try await propctlHere(["lock", "app.volume", "20"])
        XCTAssertEqual(lock.status, 0, "\(lock)")
        let unlock = try await propctlHere(["unlock", "app.volume"])
        XCTAssertEqual(unlock.status, 0, "\(unlock)")
        let rows = try await historyRows("app.volume")
        let locked = rows.first { ($0["new"] as? Int) == 20 }, unlocked = rows.last
        XCTAssertEqual(locked?["via"] as? String, "Lock", "\(rows)")
        XCTAssertEqual(unlocked?["via"] as? String, "Unlock", "\(rows)")
        XCTAssertEqual(unlocked?["new"] as? Int, 5, "\(rows)")
        for row in [locked, unlocked] {
            XCTAssertEqual(row?["uid"] as? Int, Int(getuid()), "the caller is named: \(rows)")
            XCTAssertEqual(row?["comm"] as? String, "propctl", "\(rows)")
        }
        let back = await eventually { watch.stdout.split(separator: "\n").contains { $0.hasPrefix("app.volume 5 ") && $0.contains("via Unlock") } }
        XCTAssertTrue(back, watch.stdout + watch.stderr)
    }

    func testAnUnlockByHandIsTheMandatoryFilesChangeNotTheDefaultItFallsBackTo() async throws {
        let vendor = try writeLayerFile(vendorDirectory, "defaults.d", "10-vendor.json", #"{"app.volume": 5}"#)
        try await client.create("app.volume", "i", default: .int32(50))
        let lock = try writeLayerFile(configDirectory, "mandatory.d", "10-lock.json", #"{"app.volume": 20}"#)
        let reload = try await propctlHere(["reload"])
        XCTAssertEqual(reload.status, 0, "\(reload)")
        try FileManager.default.removeItem(atPath: lock)
        let again = try await propctlHere(["reload"])
        XCTAssertEqual(again.status, 0, "\(again)")
        let rows = try await historyRows("app.volume")
        XCTAssertEqual(rows.last?["new"] as? Int, 5, "\(rows)")
        XCTAssertEqual(rows.last?["via"] as? String, "layer file \(lock)", "the lock's file went, not the vendor's (\(vendor)): \(rows)")
    }

    func testConcurrentLocksAreAllKept() async throws {
        let keys = (0..<12).map { "app.key\($0)" }
        for key in keys { try await client.create(key, "i", default: .int32(0)) }
        let results = try await withThrowingTaskGroup(of: CommandResult.self) { group in
            for (index, key) in keys.enumerated() {
                group.addTask { try await self.propctlHere(["lock", key, String(index + 1)], timeout: 30) }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        for result in results { XCTAssertEqual(result.status, 0, "\(result)") }
        let text = try String(contentsOfFile: managedFile, encoding: .utf8)
        let file = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any], text)
        XCTAssertEqual(Set(file.keys), Set(keys), "every lock is in the file: \(text)")
        for (index, key) in keys.enumerated() {
            let value = try await client.get(key)
            XCTAssertEqual(value, .int32(Int32(index + 1)), key)
        }
        // Nothing left beside it.
        let names = try FileManager.default.contentsOfDirectory(atPath: configDirectory.appendingPathComponent("mandatory.d").path)
        XCTAssertEqual(names, ["50-propctl.json"])
    }

    func testALockIsWrittenThroughAUniqueTemporaryFileSyncedBeforeAndAfterItsRename() async throws {
        try await client.create("app.volume", "i", default: .int32(50))
        let trace = bus.directory.appendingPathComponent("lock.strace").path
        let strace = try ChildProcess("/usr/bin/strace", ["-f", "-p", String(daemon.process.pid), "-o", trace,
                                                          "-e", "trace=openat,fsync,fdatasync,rename,renameat,renameat2,flock,close"],
                                      environment: [:])
        defer { strace.signal(SIGKILL) }
        let attached = await eventually(timeout: 20) { strace.stderr.contains("attached") }
        XCTAssertTrue(attached, strace.stderr)
        let lock = try await propctlHere(["lock", "app.volume", "20"])
        XCTAssertEqual(lock.status, 0, "\(lock)")
        // Detached: SIGINT makes strace let go of the daemon and flush its output.
        strace.signal(SIGINT)
        _ = await strace.waitForExit(timeout: 20)
        let lines = try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n").map(String.init)
        let folder = configDirectory.appendingPathComponent("mandatory.d").path
        func descriptor(of line: String) -> String? { line.components(separatedBy: " = ").last.flatMap { $0.split(separator: " ").first.map(String.init) } }
        let temporaryOpen = try XCTUnwrap(lines.firstIndex { $0.contains("openat(") && $0.contains(folder + "/.50-propctl.json.") && $0.contains("O_EXCL") },
                                          lines.joined(separator: "\n"))
        let temporary = try XCTUnwrap(descriptor(of: lines[temporaryOpen]))
        let directoryLock = try XCTUnwrap(lines.firstIndex { $0.contains("flock(") && $0.contains("LOCK_EX") }, lines.joined(separator: "\n"))
        let fileSync = try XCTUnwrap(lines[temporaryOpen...].firstIndex { $0.contains("fsync(\(temporary))") }, lines.joined(separator: "\n"))
        let rename = try XCTUnwrap(lines.firstIndex { $0.contains("rename") && $0.contains("\(folder)/50-propctl.json\"") }, lines.joined(separator: "\n"))
        let directoryOpens = lines.indices.filter { lines[$0].contains("openat(") && lines[$0].contains("\"\(folder)\"") && lines[$0].contains("O_DIRECTORY") }
        let directorySync = lines[rename...].firstIndex { line in
            directoryOpens.compactMap { descriptor(of: lines[$0]) }.contains { line.contains("fsync(\($0))") }
        }
        XCTAssertTrue(directoryLock < temporaryOpen && fileSync < rename, lines.joined(separator: "\n"))
        XCTAssertNotNil(directorySync, "the directory is synced after the rename:\n" + lines.joined(separator: "\n"))
    }

    func testALockReadsNoModelFileAgain() async throws {
        let model = bus.directory.appendingPathComponent("app.json")
        try #"{"groups": {"app": {"properties": {"mode": {"type": "s", "default": "a"}, "volume": {"type": "i", "default": 50}}}}}"#
            .write(to: model, atomically: true, encoding: .utf8)
        try await restartDaemon(arguments: daemonArguments + ["--model", model.path])
        try #"{"groups": {"app": {"properties": {"mode": {"type": "s", "default": "b"}, "volume": {"type": "i", "default": 50}}}}}"#
            .write(to: model, atomically: true, encoding: .utf8)
        let lock = try await propctlHere(["lock", "app.volume", "20"])
        XCTAssertEqual(lock.status, 0, "\(lock)")
        let volume = try await client.get("app.volume"), mode = try await client.get("app.mode")
        XCTAssertEqual(volume, .int32(20))
        XCTAssertEqual(mode, .string("a"), "a lock applies its own change, not every file read again")
    }

    func testALockOnTheBusIsCheckedAndAPrefixLocksEveryKeyOfTheGroup() async throws {
        try await client.create("app.volume", "i", default: .int32(50), options: ["maximum": .variant(.int32(100))])
        try await client.create("app.balance", "i", default: .int32(0))
        let tooLoud = try await busctl(["call", "org.propbus.PropBus1", "/org/propbus/PropBus1", "org.propbus.PropBus1.Manager",
                                        "Lock", "svas", "app.volume", "i", "500", "0"])
        XCTAssertNotEqual(tooLoud.status, 0, "\(tooLoud)")
        XCTAssertTrue(tooLoud.stderr.contains("100"), "the error says what was expected: \(tooLoud)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: managedFile), "nothing was written")
        let prefix = try await busctl(["call", "org.propbus.PropBus1", "/org/propbus/PropBus1", "org.propbus.PropBus1.Manager",
                                       "Lock", "svas", "app.*", "x", "7", "0"])
        XCTAssertEqual(prefix.status, 0, "\(prefix)")
        let volume = try await client.get("app.volume"), balance = try await client.get("app.balance")
        XCTAssertEqual([volume, balance], [.int32(7), .int32(7)])
        let listed = try await propctlHere(["list", "--locked", "--names"])
        XCTAssertEqual(listed.stdout, "app.balance\napp.volume\n", "\(listed)")
        let unlock = try await propctlHere(["unlock", "app.*"])
        XCTAssertEqual(unlock.status, 0, "\(unlock)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: managedFile), "an empty file is removed")
        let notLocked = try await propctlHere(["unlock", "app.volume"])
        XCTAssertEqual(notLocked.status, 1, "\(notLocked)")
        XCTAssertTrue(notLocked.stderr.contains("app.volume is not locked"), "\(notLocked)")
        // Every error names the verb once, as main prefixes it.
        let local = try await propctlHere(["unlock", "app.volume", "--default"])
        XCTAssertEqual(local.status, 64, "\(local)")
        XCTAssertTrue(local.stderr.hasPrefix("propctl unlock: --default needs --fleet"), "\(local)")
    }
}

/// Who may lock: root and propbusd's own user, as the files of `mandatory.d` are root's.
final class LockAccessTests: AccessControlTestCase, @unchecked Sendable {
    override var daemonArguments: [String] { ["--system-access"] + layerDirectoryArguments }

    func testOnlyPrivilegedCallersMayLockAndALockForAGroupRefusesItsMembers() async throws {
        try await client.create("settings.volume", "i", default: .int32(50),
                                options: ["writers": .variant(.array(of: .string, [.string("nobody"), .string("@nogroup")]))])
        let denied = try await propctlAsNobody(["lock", "settings.volume", "20"])
        XCTAssertEqual(denied.status, 1, "\(denied)")
        XCTAssertTrue(denied.stderr.contains("org.freedesktop.DBus.Error.AccessDenied") && denied.stderr.contains("settings.volume"), "\(denied)")
        let lock = try await tool(BuildProducts.propctl, ["--address", bus.address, "lock", "settings.volume", "20", "--for", "@nogroup"])
        XCTAssertEqual(lock.status, 0, "\(lock)")
        let refused = try await setAsNobody("settings.volume", "30")
        XCTAssertTrue(refused.stderr.contains(PropBusAPI.error("Locked")) && refused.stderr.contains("50-propctl.json"), "\(refused)")
        let unlock = try await propctlAsNobody(["unlock", "settings.volume"])
        XCTAssertEqual(unlock.status, 1, "nobody may not unlock either: \(unlock)")
        let rootUnlock = try await tool(BuildProducts.propctl, ["--address", bus.address, "unlock", "settings.volume"])
        XCTAssertEqual(rootUnlock.status, 0, "\(rootUnlock)")
        assertSucceeded(try await setAsNobody("settings.volume", "30"))
    }
}
