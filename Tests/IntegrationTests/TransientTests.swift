import DBus
import Foundation
import XCTest

/// Transient means memory. A round that touches only transient keys does no
/// disk I/O, so transient keys keep working on a full disk, and revisions still never go back
/// across restarts.
final class TransientTests: DaemonTestCase, @unchecked Sendable {
    private var stateDirectory: URL { bus.directory.appendingPathComponent("state") }

    private func fileSizes() -> [String: Int] {
        var sizes: [String: Int] = [:]
        for name in ["propbus.db", "propbus.db-wal"] {
            let attributes = try? FileManager.default.attributesOfItem(atPath: stateDirectory.appendingPathComponent(name).path)
            sizes[name] = (attributes?[.size] as? NSNumber)?.intValue ?? -1
        }
        return sizes
    }

    private func createTransient() async throws {
        try await client.create("vm.search", "s", default: .string(""), options: ["persistent": .variant(.boolean(false))])
    }

    func testTransientSetsWriteNothingToTheStore() async throws {
        try await createTransient()
        try await client.create("app.p", "i", default: .int32(0))
        try await client.set("app.p", .int32(1))
        let before = fileSizes()
        for index in 0..<50 { try await client.set("vm.search", .string("q\(index)")) }
        try await client.reset("vm.search")
        XCTAssertEqual(fileSizes(), before, "transient rounds grew the store")
    }

    func testRevisionsStayMonotonicAcrossRestartsWithOnlyTransientWrites() async throws {
        try await createTransient()
        for index in 0..<20 { try await client.set("vm.search", .string("q\(index)")) }
        let last = try await client.getWithRevision("vm.search").revision
        daemon.process.signal(SIGKILL)
        _ = await daemon.process.waitForExit(timeout: 10)
        _ = await eventually { !((try? await client.nameHasOwner()) ?? true) }
        daemon = try await Daemon.start(on: bus, watcher: client)
        try await client.set("vm.search", .string("after"))
        let next = try await client.getWithRevision("vm.search").revision
        XCTAssertGreaterThan(next, last, "a revision was handed out twice")
    }

    /// Restarts the daemon on a 2 MiB tmpfs mounted as the state directory (unmounted at the
    /// end of the test).
    private func restartOnSmallDisk() async throws {
        guard geteuid() == 0 else {
            throw XCTSkip("needs root to mount a small tmpfs as the state directory")
        }
        await daemon.stop()
        _ = await eventually { !((try? await client.nameHasOwner()) ?? true) }
        let mount = try await runCommand("mount", ["-t", "tmpfs", "-o", "size=2m", "tmpfs", stateDirectory.path], environment: [:])
        guard mount.succeeded else { throw XCTSkip("cannot mount a tmpfs: \(mount)") }
        let directory = stateDirectory.path
        addTeardownBlock { _ = try? await runCommand("umount", ["-l", directory], environment: [:]) }
        daemon = try await Daemon.start(on: bus, watcher: client)
    }

    /// Fills the state directory's file system.
    private func fillTheDisk() async throws {
        _ = try await runCommand("dd", ["if=/dev/zero", "of=\(filler)", "bs=64k"], environment: [:], timeout: 30)
    }

    private var filler: String { stateDirectory.appendingPathComponent("filler").path }

    func testTransientKeysKeepWorkingOnAFullDisk() async throws {
        try await restartOnSmallDisk()
        try await createTransient()
        try await client.create("app.p", "i", default: .int32(0))
        try await fillTheDisk()
        var revision: UInt64 = 0
        for index in 0..<100 {
            try await client.set("vm.search", .string("still working \(index)"))
            let next = try await client.getWithRevision("vm.search").revision
            XCTAssertGreaterThan(next, revision)
            revision = next
        }
        let value = try await client.get("vm.search")
        XCTAssertEqual(value, .string("still working 99"))
        await assertDBusError(PropBusAPI.error("StoreFailed")) { try await self.client.set("app.p", .int32(1)) }
        XCTAssertTrue(daemon.stderr.contains("store failure"), "store failures reach the log: \(daemon.stderr)")
        try await client.set("vm.search", .string("after a failed persistent write"))
        let persistent = try await client.get("app.p")
        XCTAssertEqual(persistent, .int32(0))
    }

    /// The write that reserves the next block of revisions failed on a full
    /// disk "without failing the round", the daemon went on handing out revisions it had not
    /// recorded, and after kill -9 the same revisions came again: a CompareAndSet with a
    /// revision read before the crash then succeeded on a different value (ABA).
    func testRevisionsNeverRepeatAfterACrashOnAFullDisk() async throws {
        try await restartOnSmallDisk()
        let keys = (0..<100).map { "vm.k\($0)" }
        for key in keys { try await client.create(key, "s", default: .string(""), options: ["persistent": .variant(.boolean(false))]) }
        try await client.apply(set: keys.map { ($0, .string("start")) })
        try await fillTheDisk()
        // 100 revisions a call: well past one reserved block (4096) if nothing refuses.
        var refused: DBusError?
        for round in 0..<50 {
            do {
                try await client.apply(set: keys.map { ($0, .string("before \(round)")) })
            } catch let error as DBusError {
                refused = error
                break
            }
        }
        if let refused { XCTAssertEqual(refused.name, PropBusAPI.error("StoreFailed"), refused.message) }
        var handedOut: [String: (value: DBusValue, revision: UInt64)] = [:]
        for key in keys { handedOut[key] = try await client.getWithRevision(key) }
        let (newest, read) = handedOut.max { $0.value.revision < $1.value.revision }!
        daemon.process.signal(SIGKILL)
        _ = await daemon.process.waitForExit(timeout: 10)
        _ = await eventually { !((try? await client.nameHasOwner()) ?? true) }
        try FileManager.default.removeItem(atPath: filler)
        daemon = try await Daemon.start(on: bus, watcher: client)

        // Count up to just below the revision read before the crash, then change that key.
        let others = keys.filter { $0 != newest }
        var step = 0
        var current = try await client.compareAndSet(others[0], revision: try await client.getWithRevision(others[0]).revision, .string("after"))
        while current + 1 < read.revision {
            step += 1
            let batch = others.prefix(Int(min(UInt64(others.count), read.revision - current - 1)))
            try await client.apply(set: batch.map { ($0, .string("after \(step)")) })
            current += UInt64(batch.count)
        }
        let changed = try await client.compareAndSet(newest, revision: try await client.getWithRevision(newest).revision, .string("someone else's"))
        XCTAssertGreaterThan(changed, read.revision, "revision \(changed) was handed out before the crash too (\(newest) was \(read.value) then)")
        await assertDBusError(PropBusAPI.error("Conflict")) {
            try await self.client.compareAndSet(newest, revision: read.revision, .string("based on \(read.value)"))
        }
    }
}
