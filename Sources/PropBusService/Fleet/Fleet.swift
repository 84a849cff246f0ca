import DBus
import Dispatch
import Etcd
import Glibc
import PropBus
import Synchronization
import SystemKit

/// The daemon's side of the fleet (issue 14): mirrors the fleet keys held in etcd into the
/// model, and sends the writes of fleet keys to etcd before they are committed here.
///
/// **Ownership.** The mirror's state (``state``, ``cursor``, the keys' etcd revisions, the
/// calls waiting for etcd, the ``FleetMachine``) belongs to the D-Bus connection's queue, like
/// the model. Blocking etcd calls go through the ``EtcdPort``: reads on `etcdQueue`, txns on the
/// ``lanes`` (one per write the machine lets be with etcd at once), the lease's on
/// ``FleetPresence``'s queue; each hops back with its result, and the watch's thread hops over
/// with each update. The D-Bus queue never waits for etcd. Not `Sendable`: what comes back from
/// those threads finds the fleet through a ``LoopBound``, which checks it is on the queue.
///
/// **Reads** always serve the mirror (the model), also while etcd is unreachable.
/// **Remote changes**: each watch update (one etcd revision) is applied as one round: values and
/// definitions, fleet→local bindings, command predicates, one commit of them with the etcd
/// revisions and the cursor, then signals. A change is applied only if it is newer than what
/// the mirror holds for that key, which also recognises this host's own writes coming back.
/// **Writes**: see ``write(_:compareAndSet:rerunAfterCommit:reply:_:)`` (Fleet+Writes.swift).
public final class Fleet {
    /// `Manager.FleetState`.
    public enum State: String, Sendable {
        case off, connecting, connected, unavailable
    }

    public let configuration: FleetConfiguration
    let layout: FleetLayout
    let client: any EtcdPort
    unowned let service: Service
    let queue: DispatchQueue
    /// Blocking etcd calls, in order, off the D-Bus queue.
    private let etcdQueue = DispatchQueue(label: "org.propbus.propbusd.fleet")
    /// The presence lease's calls: apart, so a keepalive waiting for a dead member never delays
    /// a write's fail-fast answer; also the watch checks' reads.
    private let presenceQueue: DispatchQueue
    /// The presence key, the presence queue's.
    private let presence: LoopBound<FleetPresence>
    /// Where watches are cancelled: a cancel waits for the stream's thread, which may itself be
    /// waiting for the D-Bus queue (it hands updates over with `queue.sync`).
    private let retireQueue = DispatchQueue(label: "org.propbus.propbusd.fleet-watch-retire")

    // The D-Bus queue's.
    public private(set) var state: State = .connecting
    /// The last etcd revision applied (`Manager.FleetRevision`); the watch resumes after it.
    public private(set) var cursor: Int64
    /// The etcd revisions of each fleet key's value and definition, as committed.
    var revisions: [Key: FleetRevisions]
    private var watch: (any EtcdWatch)?
    /// Counts watches, so updates still queued from a cancelled one are dropped.
    var watchGeneration = 0
    /// The write path's and the watch's order (``FleetMachine``); the D-Bus queue's.
    var machine: FleetMachine
    /// The calls whose fleet writes the machine holds, by its write id.
    var writes: [UInt64: PendingWrite] = [:]
    /// Events for the machine raised while it is being run (``feed(_:)``).
    var inbox: [FleetMachine.Event] = []
    var feeding = false
    /// Threads for txns: one per write the machine lets be with etcd at once, and which are free.
    let lanes = (0..<FleetMachine.maximumInFlight).map { DispatchQueue(label: "org.propbus.propbusd.fleet-txn-\($0)") }
    var freeLanes = Array((0..<FleetMachine.maximumInFlight).reversed())
    /// Txn outcomes the lanes handed over and whether a lane is delivering them to the D-Bus
    /// queue (``deliver(_:lane:_:)``): the lanes' and the D-Bus queue's, behind its mutex.
    let arrivals = FleetArrivals()
    /// Writes etcd accepted whose results are applied here, waiting for one commit together
    /// (``commitAnswers()``); only while the D-Bus queue handles a batch of outcomes.
    var awaitingCommit: [(id: UInt64, revisions: [Key: FleetRevisions])] = []
    /// Whether that commit may skip the disk (only etcd's data in it; see ``apply(_:through:snapshot:)``).
    var awaitingCommitIsMirrorOnly = true
    /// Whether outcomes are being handled as a batch (their commits wait for its end).
    var handlingAnswers = false
    /// Whether replies wait for one flush at the end of a batch's commit.
    var flushAfterReplies = false
    private var hostQueries: [UInt64: MethodCall] = [:]
    var nextID: UInt64 = 1
    /// The cursor at which the last watch check found changes in etcd the watch had not
    /// delivered (see ``checkWatch()``).
    private var suspectedCursor: Int64?
    /// The cursor at which the watch was last started again by the check.
    private var restartedAtCursor: Int64?
    private var watchCheckTimer: DispatchSourceTimer?
    var stopped = false
    /// Whether ``cursor`` is ahead of the store's (see ``apply(_:through:)``).
    private var cursorUnsaved = false
    /// The fleet the mirror belongs to (``sourceName(_:)``), as the store recorded it.
    var source: String?
    /// `FleetRevision` as last announced, when, and whether an announcement is scheduled
    /// (see ``revisionSignalInterval``).
    private var announcedCursor: Int64
    private var lastRevisionSignal = DispatchTime(uptimeNanoseconds: 1)
    private var revisionSignalDue = false
    /// Whether a full read after etcd went back in time (``FleetRewind``) is under way.
    var rewinding = false
    /// What the last time etcd went back in time looked like (the log says it too).
    private(set) var lastRewind: FleetRewind?
    /// The highest raft term each etcd member answered with in the mirror's history (see
    /// ``FleetRewind/check(_:cursor:clusterID:terms:)``); forgotten when etcd went back in time.
    var raftTerms: [UInt64: UInt64] = [:]
    /// The highest compact revision a watch was cancelled with in the mirror's history.
    private var compactionSeen: Int64 = 0
    /// The fleet's layers as etcd holds them (Fleet+Layers.swift), and the layer writes waiting
    /// for this host to apply them.
    var layerMirror = FleetLayerMirror()
    var layerWaiters: [LayerWaiter] = []
    /// "etcd cannot be reached" while it stays so: one line, then one per ``LogThrottle`` period.
    private var unreachableLog = LogThrottle(seconds: 10)
    /// The ephemeral fleet keys' lifetimes and this host's etcd leases for them (Fleet+Leases.swift).
    var lifetimes = FleetLifetimes()

    /// A fleet for `service`, from the revisions and cursor its store loaded. Call ``start()``
    /// once the daemon owns its name.
    public init(configuration: FleetConfiguration, service: Service, revisions: [Key: FleetRevisions], cursor: Int64,
                source: String? = nil, port: (any EtcdPort)? = nil) throws(FleetConfigurationError) {
        self.configuration = configuration
        layout = FleetLayout(prefix: configuration.prefix)
        do {
            client = try port ?? EtcdClient(endpoints: configuration.endpoints, options: try configuration.etcdOptions())
        } catch let error as EtcdError {
            throw FleetConfigurationError("--fleet: \(error.message)")
        } catch let error as FleetConfigurationError {
            throw error
        } catch {
            throw FleetConfigurationError("--fleet: \(error)")
        }
        self.service = service
        queue = service.tree.connection.queue
        self.revisions = revisions
        self.cursor = cursor
        self.source = source
        announcedCursor = cursor
        let wait = client.requestTimeout.components
        machine = FleetMachine(connectionWait: UInt64(wait.seconds) * 1_000_000_000 + UInt64(wait.attoseconds / 1_000_000_000),
                               layout: layout)
        let presenceQueue = DispatchQueue(label: "org.propbus.propbusd.fleet-presence")
        self.presenceQueue = presenceQueue
        presence = FleetPresence.make(client: client, key: layout.hostKey(configuration.hostName), hostName: configuration.hostName,
                                      on: presenceQueue)
    }

    /// This fleet, for work that hops back to its queue: held weakly, opened on the queue only.
    var bound: LoopBound<WeakReference<Fleet>> { LoopBound(weak: self, on: queue) }

    /// Runs `body` on the queue later (after `deadline`, if given), if the fleet still exists
    /// then. Call on the queue.
    func later(_ deadline: DispatchTime? = nil, _ body: @escaping @Sendable (Fleet) -> Void) {
        bound.async(after: deadline, body)
    }

    /// Connects: replays from the cursor, or reads everything first when there is none; starts
    /// the presence lease. The daemon serves its mirror meanwhile.
    public func start() {
        dispatchPrecondition(condition: .onQueue(queue))
        Service.log("fleet: \(configuration.endpoints.joined(separator: ", ")) prefix \(configuration.prefix) as host \(configuration.hostName); mirror at etcd revision \(cursor)")
        // A transient fleet key's value was in the last run's memory only, and the watch resumes
        // after the revision that brought it: read everything instead (a full read applies
        // etcd's values also at the revisions the mirror holds).
        let model = service.model
        let transientValueLost = revisions.contains { key, known in
            known.value > 0 && model.entry(for: key).map { !$0.definition.persistent } == true
        }
        if cursor > 0, !transientValueLost { resume() } else { resynchronize() }
        let presence = presence
        presenceQueue.async { presence.value.start() }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + Self.watchCheckInterval, repeating: Self.watchCheckInterval)
        let fleet = bound
        timer.setEventHandler { fleet.object()?.checkWatch() }
        timer.resume()
        watchCheckTimer = timer
    }

    /// Ends the watch and gives up the presence key (bounded by the request timeout).
    public func stop() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !stopped else { return }
        stopped = true
        machine.dropHeld()
        watchGeneration += 1
        retireWatch()
        if cursorUnsaved {
            let model = service.model
            model.storeChanges.saveExternalCursor(cursor)
            if !model.storeChanges.hasOwnWrites { model.storeChanges.durability = .replayable }
            if service.commit() == nil { cursorUnsaved = false }
        }
        watchCheckTimer?.cancel()
        watchCheckTimer = nil
        stopLifetimes()
        presenceQueue.sync { presence.value.stop() }
    }

    /// The etcd revision shown as `etcd_revision` for `key` (the later of its value's and its
    /// definition's), if the mirror has one.
    func etcdRevision(of key: Key) -> Int64? {
        guard let known = revisions[key] else { return nil }
        let revision = max(abs(known.value), abs(known.definition))
        return revision > 0 ? revision : nil
    }

    // MARK: State

    func setState(_ next: State) {
        guard next != state else { return }
        let old = state
        state = next
        Service.log("fleet: \(next.rawValue)")
        service.tree.noteChange(path: Key.rootPath, interface: Service.managerInterface, property: "FleetState", oldValue: .string(old.rawValue))
        service.tree.connection.scheduleRound()
        if next == .connected { unreachableLog.reset() }
        // Writes waiting for the connection are sent now, failed (unavailable), or wait within the bound.
        feed(.connection(next, now: DispatchTime.now().uptimeNanoseconds))
    }

    private func advanceCursor(to revision: Int64) {
        guard revision > cursor else { return }
        cursor = revision
        answerLayerWaiters()
        guard !revisionSignalDue else { return }
        let due = lastRevisionSignal + Self.revisionSignalInterval
        if DispatchTime.now() >= due {
            announceRevision()
        } else {
            revisionSignalDue = true
            later(due) { fleet in
                fleet.revisionSignalDue = false
                fleet.announceRevision()
            }
        }
    }

    /// The least time between two PropertiesChanged of `FleetRevision`. It moves with every
    /// write anywhere in the fleet: one signal per revision would double each host's signal
    /// traffic (and its bus's work) under a busy fleet. The last value is always announced.
    static let revisionSignalInterval: DispatchTimeInterval = .milliseconds(100)

    private func announceRevision() {
        guard cursor != announcedCursor else { return }
        lastRevisionSignal = .now()
        service.tree.noteChange(path: Key.rootPath, interface: Service.managerInterface, property: "FleetRevision",
                                oldValue: .uint64(UInt64(max(announcedCursor, 0))))
        announcedCursor = cursor
        service.tree.connection.scheduleRound()
    }

    // MARK: Watch and resynchronization

    private func startWatch(from revision: Int64) {
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
    private func retireWatch() {
        guard let old = watch else { return }
        watch = nil
        retireQueue.async { old.cancel() }
    }

    func handle(_ update: WatchUpdate) {
        switch update {
        case .created(_, let revision):
            if FleetRewind.isSuspicious(revision: revision, cursor: cursor) {
                // A member behind the others, or etcd gone back in time: a linearizable read tells.
                confirmRevision(connecting: true)
                return
            }
            connected()
        case .events(let events, _):
            apply(events, through: events.map(\.kv.modRevision).max())
        case .progress(let revision):
            if FleetRewind.isSuspicious(revision: revision, cursor: cursor) {
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

    private func connected() {
        setState(.connected)
        // At every connection, not only the first: a definition declared while etcd was
        // away (a reload) or whose offer failed is offered now, or it stays this host's.
        pushLocalDefinitions()
        refreshLifetimes()
    }

    // MARK: etcd going back in time

    /// Asks etcd with a linearizable read whether it went back in time (``FleetRewind``) after
    /// a watch reported a revision below the cursor; if not, and `connecting`, the watch's
    /// connection stands.
    private func confirmRevision(connecting: Bool) {
        let generation = watchGeneration, since = cursor, terms = raftTerms
        read(RangeRequest(key: layout.prefix, prefix: true, countOnly: true), failing: "cannot reach etcd to check its revision",
             retry: { [weak self] in self?.confirmRevision(connecting: connecting) }) { [self] response in
            guard generation == watchGeneration, !noticeRewind(response.header, since: since, terms: terms), connecting else { return }
            connected()
        }
    }

    /// Whether `header`, of a linearizable read or a txn sent when the mirror was at `since` and
    /// etcd's members had shown `terms`, shows etcd gone back in time; if so, the mirror is
    /// resynchronised to etcd (``rewound(_:)``). Also true while such a resynchronisation is
    /// under way.
    @discardableResult
    func noticeRewind(_ header: ResponseHeader, since: Int64, terms: [UInt64: UInt64]) -> Bool {
        if rewinding { return true }
        guard let rewind = FleetRewind.check(header, cursor: since, clusterID: source.flatMap(FleetRewind.clusterID(ofSource:)),
                                             terms: terms) else {
            FleetRewind.note(header, in: &raftTerms)
            return false
        }
        rewound(rewind)
        return true
    }

    /// etcd went back in time (restored from a backup, or recreated empty): said loudly, then
    /// FleetState `connecting` while the mirror is read again in full, etcd's state the source
    /// of truth (``applySnapshot(_:replacing:rewound:)``). Writes meanwhile wait.
    func rewound(_ rewind: FleetRewind) {
        Service.log("fleet: WARNING: etcd went back in time: \(rewind.description) (restored from a backup, or recreated empty?); "
            + "etcd is the source of truth: reading \(configuration.prefix) in full; fleet keys it lacks keep this host's definition, "
            + "offered to etcd again, and lose their values")
        rewinding = true
        lastRewind = rewind
        // A new history: its members' terms and compactions start again.
        raftTerms = [:]
        compactionSeen = 0
        watchGeneration += 1
        retireWatch()
        setState(.connecting)
        resynchronize(rewound: true)
    }

    /// How often ``checkWatch()`` runs.
    static let watchCheckInterval: DispatchTimeInterval = .seconds(3)

    /// Catches a watch stuck on a member that hangs without closing its connection (frozen, or
    /// behind a partition that drops packets): neither TCP nor etcd's `hasleader` tells, and the
    /// stream sits idle. Every ``watchCheckInterval`` reads (which themselves move on to a live
    /// member) ask whether the prefix holds a key changed after the cursor, and how many
    /// definitions and values etcd holds, against the mirror's counts (a deletion leaves no key
    /// to find). Behind twice at the same cursor, the watch delivered nothing for a whole
    /// interval while etcd had news: it is started again (on the member the reads reached) and
    /// resumes after the cursor. A count that differs for another reason (a foreign key under
    /// the prefix) restarts it once per cursor, not forever.
    private func checkWatch() {
        guard watch != nil, !stopped else { return }
        let since = cursor, terms = raftTerms, client = client, layout = layout
        let changed = { var r = RangeRequest(key: layout.prefix, prefix: true, limit: 1); r.minModRevision = since + 1; return r }()
        let definitions = RangeRequest(key: layout.prefix + Array("defs/".utf8), prefix: true, countOnly: true)
        let values = RangeRequest(key: layout.prefix + Array("keys/".utf8), prefix: true, countOnly: true)
        let fleet = bound
        presenceQueue.async {
            // Counting is cheap (no values read); the scan for later changes only runs when
            // etcd has moved past the cursor at all.
            guard let definitionCount = try? client.range(definitions), let valueCount = try? client.range(values) else { return }
            let counts = (definitionCount.count, valueCount.count), header = definitionCount.header
            let moved = max(definitionCount.header.revision, valueCount.header.revision) > since
            let pending: Bool? = moved ? (try? client.range(changed)).map { !$0.kvs.isEmpty } : false
            fleet.async { $0.watchChecked(since: since, terms: terms, counts: counts, header: header, pending: pending) }
        }
    }

    /// The second half of ``checkWatch()``, on the queue: etcd's counts and whether it holds
    /// changes after `since`.
    private func watchChecked(since: Int64, terms: [UInt64: UInt64], counts: (Int64, Int64), header: ResponseHeader, pending: Bool?) {
        guard !stopped, watch != nil, !noticeRewind(header, since: since, terms: terms), let pending else { return }
        let mirrored = (revisions.values.filter { $0.definition > 0 }.count, revisions.values.filter { $0.value > 0 }.count)
        let countsDiffer = counts.0 != Int64(mirrored.0) || counts.1 != Int64(mirrored.1)
        guard pending || (countsDiffer && restartedAtCursor != since), cursor == since else {
            suspectedCursor = nil
            return
        }
        guard suspectedCursor == since else {
            suspectedCursor = since
            return
        }
        suspectedCursor = nil
        restartedAtCursor = since
        Service.log("fleet: the watch delivered nothing after etcd revision \(since) while etcd holds \(pending ? "later changes" : "\(counts.0) definitions and \(counts.1) values against the mirror's \(mirrored.0) and \(mirrored.1)"); watching again on another member")
        setState(.unavailable)
        startWatch(from: since + 1)
    }

    /// The fleet a mirror belongs to: the prefix and the etcd cluster's id. Cursors and
    /// revisions count in one cluster, and a mirror holds one prefix's keys.
    private func sourceName(_ header: ResponseHeader) -> String {
        "\(configuration.prefix)@\(String(header.clusterID, radix: 16))"
    }

    /// Resumes from the cursor, once etcd says it is the fleet the mirror belongs to (one
    /// count-only read); another fleet is read in full instead (``applySnapshot(_:replacing:)``).
    private func resume() {
        let since = cursor, terms = raftTerms
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
    private func resynchronize(rewound: Bool = false) {
        let since = cursor, terms = raftTerms
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

    /// The snapshot as events: every key it holds, and a deletion at its revision for every key
    /// the mirror has that it lacks. Returns whether it was committed.
    ///
    /// `replacing`: the mirror belongs to another fleet (another prefix or cluster), whose
    /// revisions mean nothing here. Every key it had from that fleet and this one lacks goes, and
    /// this fleet's keys are applied whatever the old revisions say; keys never in any fleet
    /// (declared here) stay, and are offered to this one.
    ///
    /// `rewound`: etcd went back in time (``rewound(_:)``); its revisions started again, so the
    /// mirror's mean nothing and the cursor goes back to the snapshot's. Every key etcd holds is
    /// applied as it holds it; a fleet key it lacks keeps this host's definition (offered to etcd
    /// again once watching, by ``pushLocalDefinitions()``: the first host's offer wins) and loses
    /// its value, which no host can prove was the fleet's last.
    private func applySnapshot(_ response: RangeResponse, replacing: Bool = false, rewound: Bool = false) -> Bool {
        let revision = response.header.revision
        var events = response.kvs.map { WatchEvent(kind: .put, kv: $0) }
        let present = Set(response.kvs.map(\.key))
        let kept = revisions
        if rewound {
            for entry in service.model.list() where entry.definition.scope == .fleet && entry.storedValue != nil {
                let key = entry.definition.key
                if !present.contains(layout.valueKey(key)) {
                    events.append(WatchEvent(kind: .delete, kv: KeyValue(key: layout.valueKey(key), modRevision: revision)))
                }
            }
            let keptCursor = cursor
            for key in revisions.keys { service.model.storeChanges.removeExternalRevisions(for: key) }
            revisions = [:]
            cursor = revision
            guard apply(events, through: revision, snapshot: true) else {
                revisions = kept
                cursor = keptCursor
                return false
            }
            // Saved even when nothing changed here (an empty etcd, no values): a restart resumes
            // from etcd's revision, not the old one.
            let forgotten = revisions.filter { $0.value.value <= 0 && $0.value.definition <= 0 }.map(\.key)
            for key in forgotten { service.model.storeChanges.removeExternalRevisions(for: key) }
            service.model.storeChanges.saveExternalCursor(cursor)
            if service.commit() == nil {
                for key in forgotten { revisions[key] = nil }
                cursorUnsaved = false
            }
            announceRevision()
            return true
        }
        for (key, known) in revisions.sorted(by: { $0.key < $1.key }) {
            if (replacing ? known.definition != 0 : known.definition > 0), !present.contains(layout.definitionKey(key)) {
                events.append(WatchEvent(kind: .delete, kv: KeyValue(key: layout.definitionKey(key), modRevision: revision)))
            }
            if (replacing ? known.value != 0 : known.value > 0), !present.contains(layout.valueKey(key)) {
                events.append(WatchEvent(kind: .delete, kv: KeyValue(key: layout.valueKey(key), modRevision: revision)))
            }
        }
        if replacing {
            for key in revisions.keys { service.model.storeChanges.removeExternalRevisions(for: key) }
            revisions = [:]
        }
        // A value the fleet does not hold, of a key it defines, was written here while the
        // daemon ran without --fleet: the fleet's state (no value) wins. (A key the fleet does not
        // define at all is offered to it instead: pushLocalDefinitions.)
        for entry in service.model.list() where entry.definition.scope == .fleet && entry.storedValue != nil {
            let key = entry.definition.key
            if (revisions[key]?.value ?? 0) <= 0, present.contains(layout.definitionKey(key)), !present.contains(layout.valueKey(key)) {
                events.append(WatchEvent(kind: .delete, kv: KeyValue(key: layout.valueKey(key), modRevision: revision)))
            }
        }
        guard apply(events, through: revision, snapshot: true) else {
            if replacing { revisions = kept }
            return false
        }
        // Deletions are remembered so that an older change arriving late is recognised; after a
        // full read at R and a watch from R + 1 none can come, so they are forgotten here.
        let forgotten = revisions.filter { $0.value.value <= 0 && $0.value.definition <= 0 }.map(\.key)
        guard !forgotten.isEmpty else { return true }
        for key in forgotten { service.model.storeChanges.removeExternalRevisions(for: key) }
        // With the cursor: a replay from an older one could bring a forgotten key back.
        service.model.storeChanges.saveExternalCursor(cursor)
        if service.commit() == nil {
            for key in forgotten { revisions[key] = nil }
            cursorUnsaved = false
        }
        return true
    }

    /// Applies changes from etcd as one round: definitions first, then values (spread through
    /// bindings into local keys only), then removed definitions; one commit with the revisions
    /// and, with `through`, the cursor; then signals.
    ///
    /// A `snapshot` (a full read at one revision) is etcd's whole state: its changes are applied
    /// also at the revision the mirror already holds, so what this host changed while it ran
    /// without `--fleet` gives way to the fleet's (equal values change nothing).
    ///
    /// Returns whether the changes were committed (or there was nothing to commit).
    @discardableResult
    func apply(_ events: [WatchEvent], through revision: Int64?, snapshot: Bool = false) -> Bool {
        // This round's commit would take the answers applied before it: theirs comes first, so
        // each call is answered by the commit that holds its write.
        commitAnswers()
        let model = service.model
        noteLifetimes(events, snapshot: snapshot)
        defer { forgetEndedLifetimes() }
        // Only etcd's data in this commit (nothing local was waiting): it need not wait for the disk.
        let mirrorOnly = !model.storeChanges.hasOwnWrites
        var updated: [Key: FleetRevisions] = [:]
        func known(_ key: Key) -> FleetRevisions { updated[key] ?? revisions[key] ?? FleetRevisions() }
        // Newer than what the mirror holds (deletions are negative); a snapshot also applies
        // what it holds at the same revision.
        func isNew(_ modRevision: Int64, over held: Int64) -> Bool {
            modRevision > abs(held) || (snapshot && modRevision == abs(held))
        }
        var changes: [PropertyChange] = []
        var values: [(Key, DBusValue?)] = []
        // Who made each change, as etcd's value or definition says, or for a deletion the
        // deleter record of its transaction (history).
        var origins: [Key: WriteSet.Origin] = [:], deletedBy: [Key: WriteSet.Origin] = [:]
        let deleters = layout.deleters(in: events)
        func origin(_ caller: WriteSet.Caller?) -> WriteSet.Origin { .fleet(host: caller?.host, caller: caller) }
        model.origin = .fleet(host: nil, caller: nil)
        defer { model.origin = .daemon }
        var removed: [Key] = []
        var valuesNotFromEtcd: Set<Key> = []
        // Definitions before values whatever the order: a txn that creates a key with a value
        // holds both, and the value needs the definition.
        let ordered = events.filter { if case .definition = layout.classify($0.kv.key) { true } else { false } }
            + events.filter { if case .definition = layout.classify($0.kv.key) { false } else { true } }
        // A definition that changes a key's value spreads through this host's bindings into local
        // keys only, as values do (below): a fleet↔fleet binding ran on the writing host, if
        // anywhere, and a write of another fleet key here would change it on this host only.
        // Also the keys this update defines: they are fleet keys once applied.
        var definedHere: Set<Key> = []
        for event in events { if case .definition(let key) = layout.classify(event.kv.key) { definedHere.insert(key) } }
        var boundFleetKeys: Set<Key> = []
        for binding in definedHere.isEmpty ? [] : model.bindings.all {
            for end in [binding.key, binding.to] where definedHere.contains(end) || model.entry(for: end)?.definition.scope == .fleet {
                boundFleetKeys.insert(end)
            }
        }
        for event in ordered {
            let modRevision = event.kv.modRevision
            switch layout.classify(event.kv.key) {
            case .definition(let key):
                var revisions = known(key)
                guard isNew(modRevision, over: revisions.definition) else { continue }
                if event.kind == .delete {
                    // The value has its own deletion (the same txn deletes both).
                    revisions.definition = -modRevision
                    updated[key] = revisions
                    removed.append(key)
                    deletedBy[key] = origin(deleters[modRevision])
                    continue
                }
                if let existing = model.entry(for: key), revisions.definition == 0 {
                    noteFirstDefinition(of: key, replacing: existing, with: event.kv.value, at: modRevision)
                    // A value the mirror never had from etcd is this host's own (a model file's
                    // "value"): the fleet's stands, its value or none (below, unless this update has one).
                    if revisions.value == 0, existing.storedValue != nil { valuesNotFromEtcd.insert(key) }
                }
                revisions.definition = modRevision
                updated[key] = revisions
                do throws(PropBusError) {
                    let (type, defaultValue, options) = try FleetLayout.decodeDefinition(event.kv.value, key: key)
                    if let existing = model.entry(for: key), existing.definition.type.signature != type {
                        changes += try model.delete(key: key.text)
                    }
                    model.origin = origin(FleetLayout.definitionCaller(event.kv.value))
                    defer { model.origin = origin(nil) }
                    changes += try model.create(key: key.text, type: type, defaultValue: defaultValue, options: options, frozen: boundFleetKeys)
                } catch {
                    Service.log("fleet: the definition of \(key) at etcd revision \(modRevision) cannot be applied: \(error.message)")
                }
            case .value(let key):
                var revisions = known(key)
                guard isNew(modRevision, over: revisions.value) else { continue }
                revisions.value = event.kind == .put ? modRevision : -modRevision
                updated[key] = revisions
                if event.kind == .delete {
                    values.append((key, nil))
                    origins[key] = origin(deleters[modRevision])
                } else {
                    do throws(PropBusError) {
                        let (value, caller) = try FleetLayout.decodeAttributedValue(event.kv.value)
                        values.append((key, value))
                        origins[key] = origin(caller)
                    } catch {
                        Service.log("fleet: the value of \(key) at etcd revision \(modRevision) cannot be read: \(error.message)")
                    }
                }
            case .host, .other:
                continue
            }
        }
        if updated.values.contains(where: { $0.definition > 0 }) { changes += endBindingsOfStateToFleetKeys() }
        for key in valuesNotFromEtcd where !values.contains(where: { $0.0 == key }) { values.append((key, nil)) }
        // A key this host defines as local is not the fleet's, whatever etcd holds under its name.
        values.removeAll { model.entry(for: $0.0)?.definition.scope != .fleet }
        removed.removeAll { model.entry(for: $0)?.definition.scope != .fleet }
        if !values.isEmpty {
            // Only a bound key can be reached by propagation: the bindings' fleet ends are enough.
            var fleetKeys: Set<Key> = []
            for binding in model.bindings.all {
                for end in [binding.key, binding.to] where model.entry(for: end)?.definition.scope == .fleet { fleetKeys.insert(end) }
            }
            // One mirror per origin, so each change in history is its writer's.
            var runs: [(origin: WriteSet.Origin, values: [(Key, DBusValue?)])] = []
            for value in values {
                let origin = origins[value.0] ?? .fleet(host: nil, caller: nil)
                if runs.last?.origin == origin { runs[runs.count - 1].values.append(value) } else { runs.append((origin, [value])) }
            }
            for run in runs {
                model.origin = run.origin
                let (valueChanges, failures) = model.mirror(run.values, frozen: fleetKeys)
                changes += valueChanges
                for (key, error) in failures { Service.log("fleet: the value of \(key) from etcd was not applied: \(error.message)") }
            }
            model.origin = .fleet(host: nil, caller: nil)
        }
        for key in removed where model.entry(for: key) != nil {
            // An ephemeral key whose etcd lease ended: history says so, as for a local one.
            model.origin = lifetimeEnding(of: key) ?? deletedBy[key] ?? origin(nil)
            do throws(PropBusError) { changes += try model.delete(key: key.text) } catch {
                Service.log("fleet: \(key), deleted in the fleet, cannot be deleted here: \(error.message)")
            }
        }
        let layered = applyLayerEvents(events, snapshot: snapshot, revision: revision, defined: definedHere)
        changes += layered.changes
        if updated.isEmpty, changes.isEmpty, !layered.touched {
            // Nothing new: this host's own writes coming back. The cursor is saved by a later
            // commit (or at ``stop()``) instead of costing one of its own; a crash before that
            // replays these changes, recognised again by their revisions.
            if let revision, revision > cursor {
                advanceCursor(to: revision)
                cursorUnsaved = true
            }
            return true
        }
        for (key, revisions) in updated { model.storeChanges.saveExternalRevisions(revisions, for: key) }
        if let revision { model.storeChanges.saveExternalCursor(max(revision, cursor)) }
        service.publish(changes)
        if mirrorOnly, !service.holdsCommits, definedHere.isEmpty, removed.isEmpty, changes.allSatisfy({ change in
            guard case .valueChanged(let key, _) = change else { return false }
            return model.entry(for: key)?.definition.scope == .fleet
        }) {
            // Only fleet keys' values, which etcd holds durably: announced now, committed right
            // after, so the signal does not wait for the store. A crash in between replays them
            // from the cursor this commit saves; a failed commit reads them again (below).
            service.holdsCommits = true
            service.tree.flushNow()
            service.holdsCommits = false
        }
        if mirrorOnly { model.storeChanges.durability = .replayable }
        if let error = service.commit() {
            // Nothing of it was kept: read it all again from etcd.
            Service.log("fleet: the changes up to etcd revision \(revision ?? 0) could not be committed (\(error.message)); reading them again")
            // The watch ends here: a later update's commit would carry the cursor past these
            // changes, and a host stopped before the full read would never apply them.
            watchGeneration += 1
            retireWatch()
            later(.now() + 1) { $0.resynchronize() }
            return false
        }
        revisions.merge(updated) { $1 }
        if let revision {
            advanceCursor(to: revision)
            cursorUnsaved = false
        }
        // The signals go out now, not after a round scheduled behind this update.
        service.tree.flushNow()
        return true
    }

    /// Who made `call`, with this host's name, for the value etcd gets (and history here).
    func attribution(of call: MethodCall) -> WriteSet.Caller? {
        guard var caller = service.origin(of: call).caller else { return nil }
        caller.host = configuration.hostName
        return caller
    }

    /// Now, in nanoseconds since the epoch (the attribution's time).
    static func now() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }

    /// Fleet-scoped definitions etcd has never seen (created while the daemon ran without
    /// --fleet, or declared by a model file) are offered to the fleet, unless someone defined
    /// the key meanwhile (then theirs comes through the watch).
    func pushLocalDefinitions() {
        let model = service.model
        for entry in model.list() where entry.definition.scope == .fleet && (revisions[entry.definition.key]?.definition ?? 0) == 0 {
            let key = entry.definition.key
            var operations: [RequestOp] = [.put(layout.definitionKey(key), FleetLayout.encodeDefinition(entry.definition))]
            if let stored = entry.storedValue { operations.append(.put(layout.valueKey(key), FleetLayout.encodeValue(stored))) }
            let success = operations
            let compares = [Compare.modRevision(of: layout.definitionKey(key), is: 0)]
            let client = client, fleet = bound
            etcdQueue.async {
                guard let response = try? client.txn(compares: compares, success: success, failure: [], resendIfConnectionLost: false, timeout: nil),
                      response.succeeded else { return }
                fleet.async { fleet in
                    let revision = response.header.revision
                    var known = fleet.revisions[key] ?? FleetRevisions()
                    guard abs(known.definition) < revision else { return }
                    known.definition = revision
                    if success.count > 1 { known.value = revision }
                    fleet.service.model.storeChanges.saveExternalRevisions(known, for: key)
                    if fleet.service.commit() == nil { fleet.revisions[key] = known }
                }
            }
        }
    }

    /// FleetState `unavailable` after a write could not reach etcd, and a read at once, then
    /// every second, until one answers; then `connected` again, if the watch is up.
    func markUnreachable() {
        guard state == .connected else { return }
        setState(.unavailable)
        probeUntilReachable()
    }

    ///
    /// The first read goes at once (to the next member: the client moved past the one that
    /// failed): after a leader change etcd answers again well before a second has passed.
    private func probeUntilReachable(after delay: DispatchTimeInterval = .seconds(0)) {
        let client = client, key = layout.hostsPrefix, etcdQueue = etcdQueue
        later(.now() + delay) { fleet in
            guard !fleet.stopped, fleet.state == .unavailable, fleet.watch != nil else { return }
            let bound = fleet.bound
            etcdQueue.async {
                let reachable = (try? client.range(RangeRequest(key: key, prefix: true, countOnly: true))) != nil
                bound.async { fleet in
                    guard !fleet.stopped, fleet.state == .unavailable, fleet.watch != nil else { return }
                    if reachable {
                        fleet.setState(.connected)
                        // As on the watch's connection: what a reload declared meanwhile.
                        fleet.pushLocalDefinitions()
                    } else {
                        fleet.probeUntilReachable(after: .seconds(1))
                    }
                }
            }
        }
    }

    /// How long `Manager.ListFleetHosts` waits for etcd: a person waits for `propctl status --fleet`.
    static let hostListTimeout: Duration = .seconds(1)

    /// `Manager.ListFleetHosts`: the hosts whose presence key exists. Without a connection it
    /// fails at once, and any failure is one short line (not every endpoint's attempts).
    func listHosts(_ call: MethodCall) -> MethodResult {
        guard state == .connected else {
            call.fail(PropBusError(.unavailable, "the fleet's host list cannot be read now: FleetState is \(state.rawValue)").dbusError)
            return .deferred
        }
        let id = nextID
        nextID += 1
        hostQueries[id] = call
        let client = client, layout = layout, fleet = bound
        etcdQueue.async {
            let result = Result { () throws(EtcdError) in
                try client.range(RangeRequest(key: layout.hostsPrefix, prefix: true), timeout: Self.hostListTimeout)
            }
            fleet.async { fleet in
                guard let call = fleet.hostQueries.removeValue(forKey: id) else { return }
                switch result {
                case .success(let response):
                    let names = response.kvs.compactMap { kv -> String? in
                        if case .host(let name) = layout.classify(kv.key) { name } else { nil }
                    }.sorted()
                    call.reply([.array(of: .string, names.map { .string($0) })])
                case .failure(let error):
                    let reason = switch error.code {
                    case .unavailable: "etcd cannot be reached"
                    case .timedOut: "etcd did not answer within \(Self.hostListTimeout)"
                    default: error.message.count > 160 ? String(error.message.prefix(160)) + "…" : error.message
                    }
                    call.fail(PropBusError(.unavailable, "the fleet's host list cannot be read now: \(reason)").dbusError)
                }
            }
        }
        return .deferred
    }
}
