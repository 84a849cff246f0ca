import Foundation
import XCTest
@testable import Etcd
import EtcdTestSupport

/// Watch streams against a real single-member etcd (progress notifications every 300 ms).
final class EtcdWatchTests: XCTestCase {
    private var cluster: EtcdCluster!
    private var client: EtcdClient!
    private let prefix = Array("fleet/".utf8)

    override func setUpWithError() throws {
        cluster = try EtcdCluster(extraArguments: ["--experimental-watch-progress-notify-interval", "300ms"])
        client = try EtcdClient(endpoints: cluster.endpoints)
    }

    override func tearDown() {
        cluster?.stop()
        cluster = nil
        client = nil
    }

    private func key(_ name: String) -> [UInt8] { prefix + Array(name.utf8) }

    func testWatchSeesPutsAndDeletesInOrderWithTheirRevisions() throws {
        let log = UpdateLog()
        let stream = client.watch(prefix: prefix, onUpdate: log.append)
        defer { stream.cancel() }
        try log.waitUntilCreated()

        let a = try client.put(key: key("a"), value: [0, 1, 2])
        let outside = try client.put(key: Array("other".utf8), value: [9])
        let b = try client.put(key: key("b"), value: Array("b".utf8))
        let deleted = try client.delete(key: key("a"))
        let txn = try client.txn(compares: [], success: [.put(key("c"), [3]), .put(key("d"), [4])])

        let updates = try log.wait("five events") { _ in log.events.count >= 5 }
        let events = log.events
        XCTAssertEqual(events.map(\.kind), [.put, .put, .delete, .put, .put])
        XCTAssertEqual(events.map { String(decoding: $0.kv.key, as: UTF8.self) }, ["fleet/a", "fleet/b", "fleet/a", "fleet/c", "fleet/d"])
        XCTAssertEqual(events.map(\.kv.modRevision), [a.header.revision, b.header.revision, deleted.header.revision,
                                                      txn.header.revision, txn.header.revision])
        XCTAssertEqual(events[0].kv.value, [0, 1, 2])
        XCTAssertFalse(events.map(\.kv.modRevision).contains(outside.header.revision))
        // One txn is one update: both of its events arrive together.
        XCTAssertTrue(updates.contains { if case let .events(batch, _) = $0 { return batch.count == 2 } else { return false } })
        XCTAssertEqual(stream.nextRevision, txn.header.revision + 1)
    }

    func testWatchFromARevisionReplaysHistoryThenFollows() throws {
        let first = try client.put(key: key("x"), value: [1])
        try client.put(key: key("x"), value: [2])
        try client.delete(key: key("x"))

        let log = UpdateLog()
        let stream = client.watch(prefix: prefix, fromRevision: first.header.revision + 1, onUpdate: log.append)
        defer { stream.cancel() }
        try log.wait("the replayed history") { _ in log.events.count >= 2 }
        let later = try client.put(key: key("y"), value: [3])
        try log.wait("the new write") { _ in log.events.count >= 3 }
        XCTAssertEqual(log.events.map(\.kind), [.put, .delete, .put])
        XCTAssertEqual(log.events.map(\.kv.value), [[2], [], [3]])
        XCTAssertEqual(log.events.last?.kv.modRevision, later.header.revision)
    }

    func testWatchFromACompactedRevisionReportsTheCompactRevisionAndEnds() throws {
        let first = try client.put(key: key("x"), value: [1])
        let last = try client.put(key: key("x"), value: [2])
        try client.compact(revision: last.header.revision)

        let log = UpdateLog()
        let stream = client.watch(prefix: prefix, fromRevision: first.header.revision, onUpdate: log.append)
        defer { stream.cancel() }
        let updates = try log.wait("compaction") { $0.contains { if case .compacted = $0 { return true } else { return false } } }
        XCTAssertTrue(updates.contains(.compacted(compactRevision: last.header.revision)), "\(updates)")
        XCTAssertTrue(log.events.isEmpty)
    }

    func testProgressNotificationsAdvanceTheCursorWithoutEvents() throws {
        let log = UpdateLog()
        let stream = client.watch(prefix: prefix, onUpdate: log.append)
        defer { stream.cancel() }
        let elsewhere = try client.put(key: Array("elsewhere".utf8), value: [1])
        try log.wait("a progress notification past the unrelated write") { updates in
            updates.contains { if case let .progress(revision) = $0 { return revision >= elsewhere.header.revision } else { return false } }
        }
        XCTAssertTrue(log.events.isEmpty)
        XCTAssertGreaterThan(stream.nextRevision, elsewhere.header.revision)
    }

    func testCancelledWatchDeliversNothingMore() throws {
        let log = UpdateLog()
        let stream = client.watch(prefix: prefix, onUpdate: log.append)
        try log.waitUntilCreated()
        try client.put(key: key("before"), value: [1])
        try log.wait("the first event") { _ in log.events.count == 1 }
        stream.cancel()
        let countAfterCancel = log.all.count
        // Barrier: a second watch that sees the later write proves etcd sent it; the cancelled one
        // must not have.
        let barrier = UpdateLog()
        let second = client.watch(prefix: prefix, fromRevision: 1, onUpdate: barrier.append)
        defer { second.cancel() }
        try client.put(key: key("after"), value: [2])
        try barrier.wait("the barrier write") { _ in barrier.events.count == 2 }
        XCTAssertEqual(log.all.count, countAfterCancel)
    }

    func testWatchResumesAfterTheMemberRestartsWithoutLosingOrRepeatingEvents() throws {
        let log = UpdateLog()
        var options = EtcdOptions()
        options.watchRetryDelay = .milliseconds(50)
        let watcher = try EtcdClient(endpoints: cluster.endpoints, options: options)
        let stream = watcher.watch(prefix: prefix, onUpdate: log.append)
        defer { stream.cancel() }
        try log.waitUntilCreated()
        try client.put(key: key("1"), value: [1])
        try log.wait("event 1") { _ in log.events.count == 1 }

        cluster.kill(0)
        try log.wait("the interruption") { $0.contains { if case .interrupted = $0 { return true } else { return false } } }
        try cluster.launch(0)
        try cluster.waitUntilServing()
        try client.put(key: key("2"), value: [2])
        try client.put(key: key("3"), value: [3])
        try log.wait(timeout: 15, "events 2 and 3 after the restart") { _ in log.events.count >= 3 }
        XCTAssertEqual(log.events.map(\.kv.value), [[1], [2], [3]])
    }
}
