import DBus
import Dispatch
import Etcd
import Glibc
import PropBus
import PropBusService
import Synchronization
import SystemKit

/// The daemon's side of the fleet: mirrors the fleet keys held in etcd into the
/// model, and sends the writes of fleet keys to etcd before they are committed here.
///
/// **Ownership.** The mirror's state (``state``, ``cursor``, the keys' etcd revisions, the
/// calls waiting for etcd, the ``FleetMachine``) belongs to the D-Bus connection's queue, like
/// the model. Blocking etcd calls go through the ``EtcdPort``: reads on `etcdQueue`, txns on the
/// ``lanes`` (one per txn the machine lets be with etcd at once), the lease's on
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

    // The extensions in Fleet+*.swift use this state: internal (or `internal(set)`) rather than
    // private, as Swift's `private` does not reach an extension in another file.
    public let configuration: FleetConfiguration
    let layout: FleetLayout
    let client: any EtcdPort
    unowned let service: Service
    let queue: DispatchQueue
    /// Blocking etcd calls, in order, off the D-Bus queue.
    let etcdQueue = DispatchQueue(label: "org.propbus.propbusd.fleet")
    /// The presence lease's calls: apart, so a keepalive waiting for a dead member never delays
    /// a write's fail-fast answer; also the watch checks' reads.
    let presenceQueue: DispatchQueue
    /// The presence key, the presence queue's.
    let presence: LoopBound<FleetPresence>
    /// Where watches are cancelled: a cancel waits for the stream's thread, which may itself be
    /// waiting for the D-Bus queue (it hands updates over with `queue.sync`).
    let retireQueue = DispatchQueue(label: "org.propbus.propbusd.fleet-watch-retire")

    // The D-Bus queue's.
    public private(set) var state: State = .connecting
    /// The last etcd revision applied (`Manager.FleetRevision`); the watch resumes after it.
    public internal(set) var cursor: Int64
    /// The etcd revisions of each fleet key's value and definition, as committed.
    var revisions: [Key: FleetRevisions]
    var watch: (any EtcdWatch)?
    /// Counts watches, so updates still queued from a cancelled one are dropped.
    var watchGeneration = 0
    /// The write path's and the watch's order (``FleetMachine``); the D-Bus queue's.
    var machine: FleetMachine
    /// The calls whose fleet writes the machine holds, by its write id.
    var writes: [UInt64: PendingWrite] = [:]
    /// Events for the machine raised while it is being run (``feed(_:)``).
    var inbox: [FleetMachine.Event] = []
    var feeding = false
    /// Threads for txns: one per txn the machine lets be with etcd at once, and which are free.
    let lanes = (0..<FleetMachine.maximumInFlight).map { DispatchQueue(label: "org.propbus.propbusd.fleet-txn-\($0)") }
    var freeLanes = Array((0..<FleetMachine.maximumInFlight).reversed())
    /// Each lane's ``EtcdTxnLane``, if the port has them: a txn is started on the D-Bus queue
    /// and only its answer awaited on the lane. Owned as the lane is: by the D-Bus queue while
    /// the lane is free, by the lane's thread while its txn is out.
    let txnLanes: [(any EtcdTxnLane)?]
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
    var hostQueries: [UInt64: MethodCall] = [:]
    var nextID: UInt64 = 1
    /// The cursor at which the last watch check found changes in etcd the watch had not
    /// delivered (see ``checkWatch()``).
    var suspectedCursor: Int64?
    /// The cursor at which the watch was last started again by the check.
    var restartedAtCursor: Int64?
    /// The cursor at which the check last had the mirror read in full because its counts
    /// differed from etcd's (``FleetRewind/mirrorDisagrees``): once per cursor.
    var readAgainAtCursor: Int64?
    /// The highest etcd revision this host saw in the mirror's history: in a linearizable answer
    /// (a read's, a txn's) or recorded for a key. etcd never answers below it in one history, so
    /// an answer, or a watch created, below it is etcd gone back in time even when it is at or
    /// past the cursor (wiped, then written back up to the cursor by other hosts while this
    /// host's own write, answered past it, had not come back through the watch).
    var highestRevision: Int64
    /// What etcd may not answer below (``FleetRewind/check(_:cursor:clusterID:terms:)``).
    var rewindFloor: Int64 { max(cursor, highestRevision) }
    private var watchCheckTimer: DispatchSourceTimer?
    var stopped = false
    /// Whether ``cursor`` is ahead of the store's (see ``apply(_:through:)``).
    var cursorUnsaved = false
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
    var lastRewind: FleetRewind?
    /// The highest raft term each etcd member answered with in the mirror's history (see
    /// ``FleetRewind/check(_:cursor:clusterID:terms:)``); forgotten when etcd went back in time.
    var raftTerms: [UInt64: UInt64] = [:]
    /// The highest compact revision a watch was cancelled with in the mirror's history.
    var compactionSeen: Int64 = 0
    /// The fleet's layers as etcd holds them (Fleet+Layers.swift), and the layer writes waiting
    /// for this host to apply them.
    var layerMirror = FleetLayerMirror()
    var layerWaiters: [LayerWaiter] = []
    /// "etcd cannot be reached" while it stays so: one line, then one per ``LogThrottle`` period.
    var unreachableLog = LogThrottle(seconds: 10)
    /// The ephemeral fleet keys' lifetimes and this host's etcd leases for them (Fleet+Leases.swift).
    var lifetimes = FleetLifetimes()
    /// The last writer's record a remote value carried: the next of the same writer reads as
    /// its time alone (one record, one caller: bounded).
    var lastAttribution = FleetAttribution.LastRead()

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
        highestRevision = FleetRewind.highestRevision(cursor: cursor, revisions: revisions.values)
        self.source = source
        announcedCursor = cursor
        let wait = client.requestTimeout.components
        machine = FleetMachine(connectionWait: UInt64(wait.seconds) * 1_000_000_000 + UInt64(wait.attoseconds / 1_000_000_000),
                               layout: layout)
        let port = client
        txnLanes = (0..<FleetMachine.maximumInFlight).map { _ in port.txnLane() }
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

    func advanceCursor(to revision: Int64) {
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

    func announceRevision() {
        guard cursor != announcedCursor else { return }
        lastRevisionSignal = .now()
        service.tree.noteChange(path: Key.rootPath, interface: Service.managerInterface, property: "FleetRevision",
                                oldValue: .uint64(UInt64(max(announcedCursor, 0))))
        announcedCursor = cursor
        service.tree.connection.scheduleRound()
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
}
