import Foundation
import Synchronization
@testable import Etcd
import EtcdTestSupport

/// Collects a watch's updates from its thread, for a test to wait on.
final class UpdateLog: Sendable {
    private let updates = Mutex<[WatchUpdate]>([])

    func append(_ update: WatchUpdate) {
        updates.withLock { $0.append(update) }
    }

    var all: [WatchUpdate] { updates.withLock { $0 } }

    /// Every event delivered so far, in order.
    var events: [WatchEvent] {
        all.flatMap { update -> [WatchEvent] in
            if case let .events(events, _) = update { return events }
            return []
        }
    }

    /// Waits (polling, up to `timeout`) until `condition` holds for the updates so far.
    @discardableResult
    func wait(timeout: TimeInterval = 10, _ what: String, until condition: ([WatchUpdate]) -> Bool) throws -> [WatchUpdate] {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let snapshot = all
            if condition(snapshot) { return snapshot }
            if Date() > deadline { throw EtcdClusterError("timed out waiting for \(what); updates: \(snapshot)") }
            usleep(5_000)
        }
    }

    /// Waits until the watch is established: writes after this are seen by a watch "from now".
    func waitUntilCreated() throws {
        try wait("the watch to be created") { $0.contains { if case .created = $0 { return true } else { return false } } }
    }
}
