import DBus
import Foundation
import XCTest

/// Issue 11 item 5: transient means memory. A round that touches only transient keys does no
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

    func testTransientKeysKeepWorkingOnAFullDisk() async throws {
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
        try await createTransient()
        try await client.create("app.p", "i", default: .int32(0))
        // Fill the disk.
        let filler = stateDirectory.appendingPathComponent("filler").path
        _ = try await runCommand("dd", ["if=/dev/zero", "of=\(filler)", "bs=64k"], environment: [:], timeout: 30)
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
}
