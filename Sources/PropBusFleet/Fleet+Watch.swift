import DBus
import Dispatch
import Etcd
import Glibc
import PropBus
import PropBusService
import Synchronization
import SystemKit

extension Fleet {
    // MARK: Watch and resynchronization

    func startWatch(from revision: Int64) {
        watchGeneration += 1
        let generation = watchGeneration
        retireWatch()
        let fleet = bound, queue = queue
        watch = client.watchPrefix(layout.prefix, fromRevision: revision) { update in
            // sync: libdispatch runs it on this thread when the D-Bus queue is idle, saving a
            // thread wake-up per remote change. Safe because the D-Bus queue never waits for a
            // watch's thread (retireWatch cancels elsewhere).
            queue.sync {
                guard let fleet = fleet.object(), generation == fleet.watchGeneration, !fleet.stopped else { return }
                // Held back while a txn of the keys it touches is out (FleetMachine).
                fleet.feed(.watch(generation: generation, update))
            }
        }
    }

    /// Drops the current watch; its cancel (which waits for the stream's thread) runs off the
    /// D-Bus queue. Updates it still hands over are dropped by generation.
    func retireWatch() {
        guard let old = watch else { return }
        watch = nil
        retireQueue.async { old.cancel() }
    }

    func handle(_ update: WatchUpdate) {
        switch update {
        case .created(_, let revision):
            // Below this host's own txn answers too, not only below the cursor.
            if FleetRewind.isSuspicious(revision: revision, cursor: rewindFloor) {
                // A member behind the others, or etcd gone back in time: a linearizable read tells.
                confirmRevision(connecting: true)
                return
            }
            connected()
        case .events(let events, _):
            apply(events, through: events.map(\.kv.modRevision).max())
        case .progress(let revision):
            if FleetRewind.isSuspicious(revision: revision, cursor: rewindFloor) {
                confirmRevision(connecting: false)
                return
            }
            guard revision > cursor else { return }
            service.model.storeChanges.saveExternalCursor(revision)
            if service.commit() == nil {
                advanceCursor(to: revision)
                cursorUnsaved = false
            }
        case .interrupted(let error):
            // Once per outage: the stream retries on its own, and each failed try reports again.
            if state != .unavailable { Service.log("fleet: watch interrupted: \(error.message)") }
            setState(.unavailable)
        case .compacted(let compactRevision):
            if let rewind = FleetRewind.check(compactRevision: compactRevision, seen: compactionSeen) {
                rewound(rewind)
                return
            }
            compactionSeen = max(compactionSeen, compactRevision)
            Service.log("fleet: etcd compacted past revision \(cursor + 1) (to \(compactRevision)): reading everything again")
            watchGeneration += 1
            retireWatch()
            resynchronize()
        case .failed(let error):
            Service.log("fleet: watch ended: \(error.message); trying again in 1 s")
            watchGeneration += 1
            retireWatch()
            setState(.unavailable)
            later(.now() + 1) { fleet in
                guard !fleet.stopped, fleet.watch == nil else { return }
                fleet.startWatch(from: fleet.cursor + 1)
            }
        }
    }

    func connected() {
        setState(.connected)
        // At every connection, not only the first: a definition declared while etcd was
        // away (a reload) or whose offer failed is offered now, or it stays this host's.
        pushLocalDefinitions()
        refreshLifetimes()
    }

    /// Resumes from the cursor, once etcd says it is the fleet the mirror belongs to (one
    /// count-only read); another fleet is read in full instead (``applySnapshot(_:replacing:)``).
    func resume() {
        let since = rewindFloor, terms = raftTerms
        read(RangeRequest(key: layout.prefix, prefix: true, countOnly: true),
             failing: "cannot reach etcd to resume from revision \(cursor)",
             retry: { [weak self] in self?.resume() }) { [self] response in
            let current = sourceName(response.header)
            // The same prefix in another cluster (a restore with a new token), or a revision
            // below the mirror's: the fleet went back in time.
            if let rewind = FleetRewind.check(source: source, prefix: configuration.prefix, answeredBy: response.header) {
                rewound(rewind)
                return
            }
            if let source, source != current {
                Service.log("fleet: the mirror belongs to \(source), not \(current): reading \(current) in full instead of resuming")
                // Its revisions count in the other fleet's history.
                highestRevision = 0
                resynchronize()
                return
            }
            if source == nil { recordSource(current) }
            if noticeRewind(response.header, since: since, terms: terms) { return }
            readLayers { [weak self] in
                guard let self else { return }
                startWatch(from: cursor + 1)
            }
        }
    }

    /// Runs `request` off the D-Bus queue and hands its answer to `body` on it; when etcd cannot
    /// answer, logs `failing`, says `unavailable` and runs `retry` a second later. Call on the
    /// queue; `body` and `retry` run there.
    func read(_ request: RangeRequest, failing: String, retry: @escaping () -> Void,
              _ body: @escaping (RangeResponse) -> Void) {
        let client = client, fleet = bound, then = LoopBound((body: body, retry: retry), on: queue)
        etcdQueue.async {
            let result = Result { () throws(EtcdError) in try client.range(request) }
            fleet.async { fleet in
                guard !fleet.stopped else { return }
                switch result {
                case .success(let response):
                    fleet.unreachableLog.reset()
                    then.value.body(response)
                case .failure(let error):
                    if let held = fleet.unreachableLog.admit(at: DispatchTime.now().uptimeNanoseconds) {
                        let more = held > 0 ? " (\(held) more failed tries since the last line)" : ""
                        Service.log("fleet: \(failing): \(error.message); trying again every second\(more)")
                    }
                    fleet.setState(.unavailable)
                    then.queue.asyncAfter(deadline: .now() + 1) { then.value.retry() }
                }
            }
        }
    }

    private func recordSource(_ current: String) {
        guard source != current else { return }
        service.model.storeChanges.saveExternalSource(current)
        if service.commit() == nil { source = current }
    }

    /// Reads the whole prefix at one revision, applies the difference with the mirror as one
    /// round, then watches from the next revision.
    ///
    /// `rewound`: etcd went back in time (``rewound(_:)``); so does a snapshot below the cursor.
    func resynchronize(rewound: Bool = false) {
        let since = rewindFloor, terms = raftTerms
        read(RangeRequest(key: layout.prefix, prefix: true), failing: "cannot read \(configuration.prefix) from etcd",
             retry: { [weak self] in self?.resynchronize(rewound: rewound) }) { [self] response in
            let current = sourceName(response.header)
            let rewound = rewound || FleetRewind.check(response.header, cursor: since, clusterID: nil, terms: terms) != nil
            if rewound { raftTerms = [:] }
            FleetRewind.note(response.header, in: &raftTerms)
            let replacing = !rewound && (source.map { $0 != current } ?? false)
            // Not committed: a full read again is scheduled, and no watch may go past it.
            guard applySnapshot(response, replacing: replacing, rewound: rewound) else { return }
            rewinding = false
            recordSource(current)
            startWatch(from: response.header.revision + 1)
        }
    }
}
