import Etcd
import Foundation
@testable import PropBusFleet
import PropBusService
import Synchronization

/// An etcd in this process: keys with revisions, txns that compare mod revisions, a watch of a
/// prefix. Enough of the gateway client's behaviour for the fleet's ``EtcdPort``, and for
/// tests that drive ``FleetMachine`` by hand (``execute(_:_:_:)`` and ``events(after:)``
/// without threads).
///
/// Thread-safe (one `Mutex`); a watch delivers on a queue of its own. `gate`: txns that
/// write wait until that many are inside at once (or a second went by), and the most seen
/// together is counted, so a test can tell whether a host keeps its writes with etcd together.
final class FakeEtcd: EtcdPort {
    struct State {
        var revision: Int64 = 1
        var clusterID: UInt64 = 0xfeed
        /// The member that answers, and its raft term (a restored or recreated member starts
        /// its raft log again, at a low term).
        var memberID: UInt64 = 0x1
        var raftTerm: UInt64 = 2
        var kvs: [[UInt8]: KeyValue] = [:]
        var log: [WatchEvent] = []
        var watches: [FakeWatch] = []
        var gate = 0
        var inside = 0
        var mostInside = 0
        var txns = 0
        /// Granted leases and their TTLs (they never expire by themselves: a test revokes them).
        var leases: [Int64: Int64] = [:]
        var nextLease: Int64 = 0x7000
        /// The leases revoked, in order.
        var revoked: [Int64] = []
        /// Txns that write wait while this is set (after the gate), so their answers can be
        /// made to come back together.
        var holdAnswers = false

        func header(_ revision: Int64) -> ResponseHeader {
            ResponseHeader(revision: revision, clusterID: clusterID, memberID: memberID, raftTerm: raftTerm)
        }
    }

    let state = Mutex(State())
    let requestTimeout: Duration = .seconds(3)

    /// Runs a txn at once (no gate), as etcd would.
    static func execute(_ state: inout State, _ compares: [Compare], _ success: [RequestOp], _ failure: [RequestOp]) -> (TxnResponse, [WatchEvent]) {
        let holds = compares.allSatisfy { compare in
            let kv = state.kvs[compare.key]
            switch compare.target {
            case .modRevision(let revision): return (kv?.modRevision ?? 0) == revision
            case .value(let value): return kv?.value == value
            case .version(let version): return (kv?.version ?? 0) == version
            case .createRevision(let revision): return (kv?.createRevision ?? 0) == revision
            case .lease(let lease): return (kv?.lease ?? 0) == lease
            }
        }
        let ops = holds ? success : failure
        let writes = ops.contains { if case .range = $0 { false } else { true } }
        if writes { state.revision += 1 }
        let revision = state.revision
        var responses: [ResponseOp] = []
        var events: [WatchEvent] = []
        for op in ops {
            switch op {
            case .range(let request):
                let kvs = state.kvs[request.key].map { [$0] } ?? []
                responses.append(.range(RangeResponse(header: state.header(revision), kvs: kvs)))
            case .put(let request):
                let old = state.kvs[request.key]
                let kv = KeyValue(key: request.key, value: request.value, createRevision: old?.createRevision ?? revision,
                                  modRevision: revision, version: (old?.version ?? 0) + 1, lease: request.lease)
                state.kvs[request.key] = kv
                events.append(WatchEvent(kind: .put, kv: kv))
            case .deleteRange(let request):
                if state.kvs.removeValue(forKey: request.key) != nil {
                    events.append(WatchEvent(kind: .delete, kv: KeyValue(key: request.key, modRevision: revision)))
                }
            }
        }
        state.log += events
        return (TxnResponse(header: state.header(revision), succeeded: holds, responses: responses), events)
    }

    /// Forgets everything, as etcd recreated empty on the same endpoints would.
    func wipe() {
        state.withLock { $0.kvs = [:]; $0.log = []; $0.revision = 1 }
    }

    func value(of key: [UInt8]) -> [UInt8]? { state.withLock { $0.kvs[key]?.value } }

    // MARK: EtcdPort

    func range(_ request: RangeRequest) throws(EtcdError) -> RangeResponse {
        state.withLock { state in
            let header = state.header(state.revision)
            let end = request.rangeEnd
            let kvs = state.kvs.values.filter { kv in
                if let end { return kv.key.lexicographicallyPrecedes(end) && !kv.key.lexicographicallyPrecedes(request.key) }
                return kv.key == request.key
            }.filter { request.minModRevision == 0 || $0.modRevision >= request.minModRevision }
                .sorted { $0.key.lexicographicallyPrecedes($1.key) }
            return RangeResponse(header: header, kvs: request.countOnly ? [] : kvs, count: Int64(kvs.count))
        }
    }

    func range(_ request: RangeRequest, timeout: Duration) throws(EtcdError) -> RangeResponse { try range(request) }

    func txn(compares: [Compare], success: [RequestOp], failure: [RequestOp], resendIfConnectionLost: Bool,
             timeout: Duration?) throws(EtcdError) -> TxnResponse {
        let gated = state.withLock { state -> Bool in
            state.txns += 1
            guard state.gate > 0, success.contains(where: { if case .put = $0 { true } else { false } }) else { return false }
            state.inside += 1
            state.mostInside = max(state.mostInside, state.inside)
            return true
        }
        if gated {
            let start = ContinuousClock.now
            while state.withLock({ $0.inside < $0.gate }), ContinuousClock.now - start < .seconds(1) { usleep(1000) }
        }
        while state.withLock({ $0.holdAnswers }) { usleep(1000) }
        return state.withLock { state in
            if gated { state.inside -= 1 }
            let (response, events) = Self.execute(&state, compares, success, failure)
            // Under the lock: concurrent txns reach the watches in etcd's order.
            if !events.isEmpty {
                for watch in state.watches { watch.deliver(.events(events, revision: response.header.revision)) }
            }
            return response
        }
    }

    func put(key: [UInt8], value: [UInt8], lease: Int64) throws(EtcdError) -> PutResponse {
        throw EtcdError(.server, "the fake etcd takes txns only")
    }

    func grantLease(ttl: Int64) throws(EtcdError) -> Lease {
        state.withLock { state in
            state.nextLease += 1
            state.leases[state.nextLease] = ttl
            return Lease(id: state.nextLease, ttl: ttl)
        }
    }

    func keepAlive(lease id: Int64) throws(EtcdError) -> Int64 {
        guard let ttl = state.withLock({ $0.leases[id] }) else { throw EtcdError(.leaseNotFound, "lease \(id) not found") }
        return ttl
    }

    /// Ends lease `id`: its keys are deleted in one revision, as etcd does.
    func revoke(lease id: Int64) throws(EtcdError) {
        let found = state.withLock { state -> Bool in
            guard state.leases.removeValue(forKey: id) != nil else { return false }
            state.revoked.append(id)
            let attached = state.kvs.values.filter { $0.lease == id }.map(\.key).sorted { $0.lexicographicallyPrecedes($1) }
            guard !attached.isEmpty else { return true }
            let (response, events) = Self.execute(&state, [], attached.map { .delete($0) }, [])
            for watch in state.watches { watch.deliver(.events(events, revision: response.header.revision)) }
            return true
        }
        if !found { throw EtcdError(.leaseNotFound, "lease \(id) not found") }
    }

    func watchPrefix(_ prefix: [UInt8], fromRevision: Int64, onUpdate: @escaping @Sendable (WatchUpdate) -> Void) -> any EtcdWatch {
        let watch = FakeWatch(prefix: prefix, onUpdate: onUpdate)
        state.withLock { state in
            let backlog = state.log.filter { $0.kv.modRevision >= fromRevision }
            watch.deliver(.created(endpoint: "fake", revision: state.revision))
            if !backlog.isEmpty { watch.deliver(.events(backlog, revision: state.revision)) }
            state.watches.append(watch)
        }
        return watch
    }
}

/// A watch of ``FakeEtcd``: updates in order, on a queue of its own.
final class FakeWatch: EtcdWatch {
    private let queue = DispatchQueue(label: "fake-etcd-watch")
    private let prefix: [UInt8]
    private let onUpdate: @Sendable (WatchUpdate) -> Void
    private let cancelled = Mutex(false)

    init(prefix: [UInt8], onUpdate: @escaping @Sendable (WatchUpdate) -> Void) {
        self.prefix = prefix
        self.onUpdate = onUpdate
    }

    func deliver(_ update: WatchUpdate) {
        var update = update
        if case .events(let events, let revision) = update {
            let mine = events.filter { $0.kv.key.starts(with: prefix) }
            guard !mine.isEmpty else { return }
            update = .events(mine, revision: revision)
        }
        let delivered = update
        queue.async { [self] in if !cancelled.withLock({ $0 }) { onUpdate(delivered) } }
    }

    func cancel() { cancelled.withLock { $0 = true } }
}
