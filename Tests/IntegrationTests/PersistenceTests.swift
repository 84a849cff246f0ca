import CSQLite
import DBus
import Foundation
import XCTest

/// docs/dbus-api.md, "Persistence": acknowledged writes are durable, a damaged store is never silently replaced, and a
/// failed commit leaves the daemon as it was.
final class PersistenceTests: DaemonTestCase, @unchecked Sendable {
    /// Where the daemon keeps its store: the fixture points `$STATE_DIRECTORY` into the bus's directory.
    private var storePath: String { bus.directory.appendingPathComponent("state/propbus.db").path }

    /// Kills the daemon as a crash would and starts a new one on the same bus and state directory.
    private func crashAndRestart() async throws {
        daemon.process.signal(SIGKILL)
        _ = await daemon.process.waitForExit(timeout: 10)
        _ = await eventually { !((try? await client.nameHasOwner()) ?? true) }
        daemon = try await Daemon.start(on: bus, watcher: client)
    }

    func testValuesAndRuntimeDefinitionsSurviveARestart() async throws {
        try await client.create("app.volume", "d", default: .double(0.5),
                                options: ["minimum": .variant(.double(0)), "maximum": .variant(.double(1)),
                                          "description": .variant(.string("Output volume"))])
        try await client.create("app.theme", "s", default: .string("light"))
        try await client.create("app.counts", "a{su}", default: .dictionary(key: .string, value: .uint32, []))
        try await client.create("vm.search", "s", default: .string(""), options: ["persistent": .variant(.boolean(false))])
        try await client.set("app.volume", .double(0.1))
        try await client.set("app.theme", .string("dark"))
        try await client.reset("app.theme")
        try await client.set("app.counts", .dictionary(key: .string, value: .uint32, [DictionaryEntry(.string("a"), .uint32(UInt32.max))]))
        try await client.set("vm.search", .string("kittens"))

        try await restartDaemon(arguments: [])

        let volumeValue = try await client.get("app.volume")
        XCTAssertEqual(volumeValue, .double(0.1))
        let theme = try await client.get("app.theme")
        XCTAssertEqual(theme, .string("light"), "a Reset survives as the default")
        let counts = try await client.get("app.counts")
        XCTAssertEqual(counts, .dictionary(key: .string, value: .uint32, [DictionaryEntry(.string("a"), .uint32(UInt32.max))]))
        let search = try await client.get("vm.search")
        XCTAssertEqual(search, .string(""), "a transient value never reaches the disk")
        let volume = try await client.list(prefix: "app.volume").first
        XCTAssertEqual(volume?.metadata["minimum"], .double(0))
        XCTAssertEqual(volume?.metadata["maximum"], .double(1))
        XCTAssertEqual(volume?.metadata["description"], .string("Output volume"))
        let searchPersistent = try await client.list(prefix: "vm.").first?.metadata["persistent"]
        XCTAssertEqual(searchPersistent, .boolean(false))
        // The range survived with the definition: it is still enforced.
        await assertDBusError(PropBusAPI.error("OutOfRange")) { try await self.client.set("app.volume", .double(2)) }
    }

    func testEveryAcknowledgedWriteSurvivesSIGKILL() async throws {
        for index in 0..<50 {
            try await client.create("crash.k\(index)", "i", default: .int32(0))
            try await client.set("crash.k\(index)", .int32(Int32(index) * 10 + 1))
        }
        try await client.create("crash.counter", "t", default: .uint64(0))
        for value in 1...300 { try await client.set("crash.counter", .uint64(UInt64(value))) }

        try await crashAndRestart()

        for index in 0..<50 {
            let value = try await client.get("crash.k\(index)")
            XCTAssertEqual(value, .int32(Int32(index) * 10 + 1), "crash.k\(index)")
        }
        let counter = try await client.get("crash.counter")
        XCTAssertEqual(counter, .uint64(300))
        let revision = try await client.getWithRevision("crash.counter").revision
        try await client.set("crash.counter", .uint64(301))
        let nextRevision = try await client.getWithRevision("crash.counter").revision
        XCTAssertGreaterThan(nextRevision, revision, "revisions keep growing after a crash")
    }

    func testCorruptStoreExitsNonZeroNamingTheFile() async throws {
        try await client.create("app.a", "i", default: .int32(1))
        await daemon.stop()
        try corruptStore()

        let result = try await tool(BuildProducts.propbusd, ["--address", bus.address], timeout: 15)
        XCTAssertNotNil(result.termination, "propbusd must exit, not serve an empty store")
        XCTAssertNotEqual(result.termination, .exited(0))
        XCTAssertTrue(result.stderr.contains(storePath), result.stderr)
        XCTAssertTrue(result.stderr.contains("--recover"), result.stderr)
        let owned = try await client.nameHasOwner()
        XCTAssertFalse(owned)
    }

    func testRecoverKeepsTheBadFileAndStartsFresh() async throws {
        try await client.create("app.a", "i", default: .int32(1))
        await daemon.stop()
        try corruptStore()
        let damaged = try Data(contentsOf: URL(fileURLWithPath: storePath))

        daemon = try await Daemon.start(on: bus, arguments: ["--recover"], watcher: client)

        let count = try await client.list().count
        XCTAssertEqual(count, 0, "a fresh store")
        let directory = URL(fileURLWithPath: storePath).deletingLastPathComponent().path
        let kept = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasPrefix("propbus.db.corrupt-") }
        XCTAssertEqual(kept.count, 1, "\(kept)")
        XCTAssertEqual(try kept.first.map { try Data(contentsOf: URL(fileURLWithPath: directory + "/" + $0)) }, damaged)
        XCTAssertTrue(FileManager.default.fileExists(atPath: storePath), "the new store sits beside the kept one")
        XCTAssertTrue(daemon.stderr.contains(storePath), daemon.stderr)
        // The new store works.
        try await client.create("app.b", "i", default: .int32(1))
        try await client.set("app.b", .int32(2))
        try await restartDaemon(arguments: [])
        let restored = try await client.get("app.b")
        XCTAssertEqual(restored, .int32(2))
    }

    func testFailedCommitAnswersStoreFailedUndoesTheChangeAndKeepsServingReads() async throws {
        try await client.create("app.a", "i", default: .int32(1))
        try await client.set("app.a", .int32(2))
        let changes = try await client.recordChanges(ofGroup: "app")
        let added = try await client.record(member: "InterfacesAdded")

        // Another process holding the write lock makes the daemon's commit fail (after its
        // busy timeout), as a full disk or an I/O error would.
        let blocker = try LockingConnection(path: storePath)
        await assertDBusError(PropBusAPI.error("StoreFailed"), containing: [storePath]) {
            try await self.client.set("app.a", .int32(3))
        }
        await assertDBusError(PropBusAPI.error("StoreFailed")) {
            try await self.client.create("other.b", "s", default: .string("x"))
        }
        await assertDBusError(PropBusAPI.error("StoreFailed")) {
            try await self.client.apply(set: [("app.a", .int32(4))])
        }
        let current = try await client.get("app.a")
        XCTAssertEqual(current, .int32(2), "the model is as it was")
        let others = try await client.list(prefix: "other.").count
        XCTAssertEqual(others, 0)
        let revision = try await client.getWithRevision("app.a").revision
        blocker.release()

        try await client.set("app.a", .int32(5))
        let nextRevision = try await client.getWithRevision("app.a").revision
        XCTAssertGreaterThan(nextRevision, revision)
        let signals = await changes.wait(count: 1)
        XCTAssertEqual(signals.map(\.changed), [["a": .int32(5)]], "no signal for the undone writes")
        XCTAssertEqual(added.signals.count, 0, "no InterfacesAdded for the undone group")
        try await restartDaemon(arguments: [])
        let afterRestart = try await client.get("app.a")
        XCTAssertEqual(afterRestart, .int32(5))
    }

    /// Overwrites the store with bytes that are not a database and drops its WAL.
    private func corruptStore() throws {
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: storePath + suffix) }
        var bytes = [UInt8](repeating: 0, count: 16_384)
        for index in bytes.indices { bytes[index] = UInt8(truncatingIfNeeded: index &* 7919 &+ 13) }
        try Data(bytes).write(to: URL(fileURLWithPath: storePath))
    }
}

/// A second SQLite connection that holds the store's write lock until released: the daemon's
/// commits then fail (after its busy timeout), as on a full disk (also ModelFileTrustTests).
final class LockingConnection {
    private var handle: OpaquePointer?

    init(path: String) throws {
        guard sqlite3_open(path, &handle) == SQLITE_OK,
              sqlite3_exec(handle, "BEGIN IMMEDIATE", nil, nil, nil) == SQLITE_OK else {
            throw TestSetupError("cannot lock \(path): \(String(cString: sqlite3_errmsg(handle)))")
        }
    }

    func release() {
        sqlite3_exec(handle, "ROLLBACK", nil, nil, nil)
        sqlite3_close(handle)
        handle = nil
    }

    deinit { if handle != nil { release() } }
}
