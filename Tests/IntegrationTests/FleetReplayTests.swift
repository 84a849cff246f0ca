import CSQLite
import DBus
import Etcd
import Foundation
import PropBus
import XCTest

/// A host's own writes coming back through its watch commit nothing, not even the cursor they
/// advance (it rides with a later commit, or is saved at stop). After a crash, a host replays from
/// its stored cursor; the changes it had applied are recognised by their revisions, not applied or
/// announced again.
final class FleetReplayTests: FleetTestCase {
    /// Killed before any commit carried the cursor past its own writes, a host replays them
    /// from the older cursor at start-up: they must be recognised, not applied or announced
    /// again.
    func testOwnWritesReplayedAfterACrashAreNotAnnouncedAgain() async throws {
        try await writeFiveValues(to: "lab.echo.n", waitingOn: hostB)
        let revisionBefore = try await hostA.managerProperty("FleetRevision")
        let before = try XCTUnwrap(Fleet.integer(revisionBefore))
        try await assertRestartAfterACrashAnnouncesNothingOld(hostA, key: "lab.echo.n", laterWriter: hostB)
        let revisionAfter = try await hostA.managerProperty("FleetRevision")
        let after = try XCTUnwrap(Fleet.integer(revisionAfter))
        XCTAssertGreaterThan(after, before, "FleetRevision went back after the restart")
    }

    /// Killed right after applying remote changes, a host replays them at start-up without
    /// announcing them again.
    func testRemoteChangesReplayedAfterACrashAreNotAnnouncedAgain() async throws {
        try await writeFiveValues(to: "lab.replay.n", waitingOn: hostB)
        let applied = await hostB.waitFor("lab.replay.n", .int32(5))
        XCTAssertTrue(applied, diagnostics)
        try await assertRestartAfterACrashAnnouncesNothingOld(hostB, key: "lab.replay.n", laterWriter: hostA)
    }

    /// Creates fleet key `key` (`i`) on A, waits until `other` has it, and sets it to 1…5 on A.
    private func writeFiveValues(to key: String, waitingOn other: FleetHost) async throws {
        try await hostA.createFleet(key, "i", default: .int32(0))
        let defined = await other.waitFor(key, .int32(0))
        XCTAssertTrue(defined, diagnostics)
        for value in Int32(1)...5 { try await hostA.client.set(key, .int32(value)) }
    }

    /// Kills `host` (holding 5 under `key`) and starts it again; it must hold 5 and announce
    /// nothing before a later write of 6 by `laterWriter` (the barrier).
    private func assertRestartAfterACrashAnnouncesNothingOld(_ host: FleetHost, key: String, laterWriter: FleetHost) async throws {
        let parsed = try Key(key)
        await host.kill()
        let changes = try await host.recordFromAnySender(path: Key.objectPath(ofGroup: parsed.group),
                                                         interface: PropBusAPI.properties, member: "PropertiesChanged")
        try await host.start()
        let value = try await host.client.get(key)
        XCTAssertEqual(value, .int32(5), diagnostics)
        try await laterWriter.client.set(key, .int32(6))
        let seen = await changes.wait { $0.contains { $0.changed[parsed.name] == .int32(6) } }
        let announced = seen.compactMap { $0.changed[parsed.name] }
        XCTAssertEqual(announced, [.int32(6)], "\(host.name) announced changes it had applied before the crash\n\(diagnostics)")
    }

    /// A clean stop commits the cursor its own writes advanced: the store holds the revision
    /// FleetRevision showed.
    func testACleanStopKeepsTheCursorOfOwnWrites() async throws {
        try await hostA.createFleet("lab.echo.m", "i", default: .int32(0))
        for value in Int32(1)...3 { try await hostA.client.set("lab.echo.m", .int32(value)) }
        // The last Set's echo has come back once FleetRevision reaches its etcd revision.
        let etcdRevision = try await hostA.etcdRevision("lab.echo.m")
        let written = try XCTUnwrap(etcdRevision)
        var shown: Int64 = 0
        let reached = await eventually(timeout: 10) {
            shown = (try? await self.hostA.managerProperty("FleetRevision")).flatMap(Fleet.integer) ?? 0
            return shown >= written
        }
        XCTAssertTrue(reached, "FleetRevision \(shown) never reached the write's revision \(written)\n\(diagnostics)")

        await hostA.stop()
        let stored = try storedCursor(in: hostA.stateDirectory)
        XCTAssertGreaterThanOrEqual(stored, shown, "the store's cursor is behind what FleetRevision showed before the stop")
    }

    /// A remote change whose commit failed (another process held the store's write lock past
    /// the busy timeout) must not be skipped by the cursor a later update commits: killed before
    /// the full read that was to repair it, the host would resume after it and never apply it.
    func testARemoteChangeWhoseCommitFailedIsNotSkippedByALaterCommittedCursor() async throws {
        try await hostA.createFleet("lab.lost.first", "i", default: .int32(0))
        try await hostA.createFleet("lab.lost.second", "i", default: .int32(0))
        let defined = await hostB.waitFor("lab.lost.second", .int32(0))
        XCTAssertTrue(defined, diagnostics)

        // Someone's sqlite3 shell holds B's store's write lock: B's next commit fails.
        var handle: OpaquePointer?
        let path = hostB.stateDirectory.appendingPathComponent("propbus.db").path
        XCTAssertEqual(sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE, nil), SQLITE_OK)
        defer { sqlite3_close(handle) }
        XCTAssertEqual(sqlite3_exec(handle, "BEGIN IMMEDIATE", nil, nil, nil), SQLITE_OK, String(cString: sqlite3_errmsg(handle)))
        try await hostA.client.set("lab.lost.first", .int32(1))
        let failed = await eventually(timeout: 10) { self.hostB.stderr.contains("could not be committed") }
        XCTAssertTrue(failed, "B's commit did not fail\n\(diagnostics)")

        // The lock goes; a later remote change commits on B (before the repair, if B lets it).
        try await hostA.client.set("lab.lost.second", .int32(2))
        XCTAssertEqual(sqlite3_exec(handle, "ROLLBACK", nil, nil, nil), SQLITE_OK)
        let applied = await hostB.waitFor("lab.lost.second", .int32(2))
        XCTAssertTrue(applied, diagnostics)
        await hostB.kill()
        try await hostB.start()
        try await Fleet.barrier(from: hostA, to: hostB)
        let first = try await hostB.client.get("lab.lost.first")
        XCTAssertEqual(first, .int32(1), "B resumed after a change it never committed: the fleet holds 1\n\(diagnostics)")
    }

    /// The `fleet_cursor` row of the store in `directory`, read with a connection of our own.
    private func storedCursor(in directory: URL) throws -> Int64 {
        let path = try XCTUnwrap(FileManager.default.contentsOfDirectory(atPath: directory.path).first { $0.hasSuffix(".sqlite") || $0.hasSuffix(".db") },
                                 "no store in \(directory.path)")
        var handle: OpaquePointer?
        guard sqlite3_open_v2(directory.appendingPathComponent(path).path, &handle, SQLITE_OPEN_READONLY, nil) == SQLITE_OK else {
            throw TestSetupError("cannot open the store: \(String(cString: sqlite3_errmsg(handle)))")
        }
        defer { sqlite3_close(handle) }
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(handle, "SELECT value FROM meta WHERE name = 'fleet_cursor'", -1, &statement, nil) == SQLITE_OK else {
            throw TestSetupError("cannot read the store: \(String(cString: sqlite3_errmsg(handle)))")
        }
        defer { sqlite3_finalize(statement) }
        guard sqlite3_step(statement) == SQLITE_ROW else { throw TestSetupError("the store has no fleet cursor") }
        return sqlite3_column_int64(statement, 0)
    }
}
