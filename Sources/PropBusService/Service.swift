import DBus
import Dispatch
import Glibc
import PropBus
import PropBusExec
import PropBusModelFiles
import PropBusSystem
import SystemKit

/// The daemon's brain: exports a ``PropertyModel`` over D-Bus.
///
/// Confined to the connection's queue: the model, the object tree and this service are only
/// touched there. `@unchecked Sendable` for that reason, like ``ObjectTree``: work that ends
/// elsewhere (a command's process) hops back to that queue before touching anything.
public final class Service {
    /// The well-known bus name.
    public static let busName = PropBusAPI.busName
    /// The daemon's version, exposed as `Manager.Version`.
    public static let version = PropBusAPI.version
    package static let managerInterface = PropBusAPI.managerInterface
    static let valuesInterface = PropBusAPI.valuesInterface

    static let bindingInterface = PropBusAPI.bindingInterface
    static let commandInterface = PropBusAPI.commandInterface

    /// Service-wide settings from the daemon's options.
    public struct Options: Sendable {
        /// The most bindings one connection may hold (`--max-bindings-per-client`).
        public var maximumBindingsPerClient = 64
        /// Seconds between SIGTERM and SIGKILL when an execution is cancelled or times out.
        public var killGrace = 2.0
        /// Who may write and read what (docs/security.md); ``AccessPolicy/open`` (everything allowed,
        /// no credential lookups) unless `--system` or `--system-access`.
        public var access = AccessPolicy.open
        /// The bytes of replies one uid may be sent within 10 s (`--max-reply-bytes-per-uid`,
        /// see ``ReplyBytesQuota``); root and the daemon's user are exempt, and without access
        /// checks (no credentials) nobody is charged.
        public var maximumReplyBytesPerUID = 32 << 20
        /// Whether history records callers' processes (`comm`, `exe`, unit, user name): off
        /// with `--no-history`, when nothing would read them.
        public var recordsCallers = true
        /// `--config-dir`, where `propctl lock` writes (`Manager.ConfigDirectory`); `nil`: none.
        public var configDirectory: String?
        /// Programs the daemon runs besides executions, at most at once, in the same I/O loop.
        public var otherProcesses = 0
        /// The largest value a change signal carries (`--max-signalled-value-size`); a larger
        /// one is announced by invalidation (``SignalCharges/maximumValueSize``).
        public var maximumSignalledValueSize = 4096
        /// The most bytes of the daemon's messages the bus may hold unread before large replies
        /// are refused (`--max-bus-held-bytes`, ``BusBacklog``); `nil`: no bound.
        public var maximumBusHeldBytes: Int? = 64 << 20

        public init(maximumBindingsPerClient: Int = 64, killGrace: Double = 2.0, access: AccessPolicy = .open,
                    maximumReplyBytesPerUID: Int = 32 << 20) {
            self.maximumBindingsPerClient = maximumBindingsPerClient
            self.killGrace = killGrace
            self.access = access
            self.maximumReplyBytesPerUID = maximumReplyBytesPerUID
        }
    }

    /// Signals the service needs; the daemon subscribes to them before owning its name, so that
    /// no client can make a binding whose end it would miss.
    public static let matchRules = [
        MatchRule.nameOwnerChanged(),
    ]

    package let model: PropertyModel
    let store: PropertyStore
    /// Change history and refused attempts (`ListHistory`, `Revert`, `--history-denied`);
    /// `nil` without a store that keeps them (`--in-memory`): those methods are `Unavailable`.
    let history: (any HistoryStore)?
    let commands: CommandTable
    /// The transaction of the current dispatch round (model, command table, store).
    let round: Round
    package let tree: ObjectTree
    let options: Options
    /// The work of every running execution, by execution id.
    var running: [UInt64: ExecutionWork] = [:]
    /// The one thread that does the I/O of every running exec execution, sized to the
    /// executions the command table admits and the other programs the daemon runs
    /// (``Options/otherProcesses``: renders' checks and reloads).
    package let executionIO: CommandIOLoop
    /// While set, rounds do not commit: the daemon holds the store's writes until it owns its
    /// name, so a daemon that loses the name leaves its store as it found it.
    public var holdsCommits = false
    /// Re-reads the model files (`Manager.Reload`, SIGHUP); set by the daemon, which knows them.
    /// Called on the queue; reads the files off it, applies them between rounds, and then calls
    /// `done` on the queue with the files it skipped.
    public var reloadHandler: ((_ done: @escaping @Sendable (Result<[ModelFileSet.Skipped], DBusError>) -> Void) -> Void)?
    /// The model files skipped by the last load, for `SkippedModelFiles` (`propctl status`).
    public var skippedModelFiles: [ModelFileSet.Skipped] = []
    /// The layer-file problems `SkippedModelFiles` last announced.
    public var announcedLayerProblems: [LayerProblem] = []
    /// What holds some keys elsewhere too and decides where their writes go first (the
    /// fleet's mirror, `--fleet`); `nil`: every write is this service's alone.
    public var gate: (any WriteGate)?
    /// Members another component adds to the Manager interface (the fleet's, also without
    /// `--fleet`); `nil`: the service's own only.
    public let managerExtension: (any ManagerExtension)?
    /// Told of every commit the store refused (the daemon logs them, rate-limited).
    public var storeFailureHandler: ((PropBusError) -> Void)?
    /// Groups exported since the last flush: a property created in one needs no PropertiesChanged.
    private var groupsExportedThisRound: Set<String> = []
    /// Binding objects currently exported, so a rolled-back round can be undone.
    private var exportedBindings: Set<UInt64> = []
    /// What is sent to or because of each caller, charged to it (``SentBytesCharges``).
    var charges: SentBytesCharges
    /// When the memory of a burst of work goes back to the kernel (``FreeMemoryRelease``).
    private var freeMemory = FreeMemoryRelease()
    /// Gives freed memory back to the kernel; a test counts the calls instead.
    var releaseFreeMemory: () -> Void = { FreeMemoryRelease.releaseNow() }
    /// How long the queue must see no more work before a due release runs, so that a burst
    /// pays for it once, at its end; zero: the queue's next turn.
    var freeMemoryQuietPeriod: DispatchTimeInterval = .seconds(1)
    /// The one timer of the leases' TTLs, armed for the earliest end (``armLeaseTimer()``).
    var leaseTimer: DispatchSourceTimer?
    /// The end it is armed for (nanoseconds since the epoch).
    var leaseTimerDeadline: UInt64?
    /// Whether TTLs end (``startLeases()``): not before the name is owned, or nobody would see it.
    var leasesStarted = false
    /// Each calling connection's process as history names it (user, `comm`, `exe`, unit), read
    /// from `/proc` at its first write and forgotten when it leaves the bus: a connection
    /// belongs to one process, so a write costs no lookup after the first. One entry per
    /// connected writer.
    private var describedCallers: [String: WriteSet.Caller] = [:]
    /// Whether a history pruning step is queued (``scheduleHistoryPruning()``).
    var historyPruningScheduled = false

    /// Builds the object tree for `model` on `connection`. Call on the connection's queue, before
    /// requesting the bus name, so that no client can see a half-exported daemon.
    /// - Parameter managerExtension: members another component adds to the Manager interface,
    ///   given here because the interface's description is built once.
    public init(connection: Connection, model: PropertyModel, store: PropertyStore, history: (any HistoryStore)? = nil,
                commands: CommandTable? = nil, options: Options = Options(), managerExtension: (any ManagerExtension)? = nil) {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        self.model = model
        self.managerExtension = managerExtension
        self.store = store
        self.history = history
        self.commands = commands ?? CommandTable(model: model)
        round = Round(model: model, commands: self.commands, store: store)
        executionIO = CommandIOLoop(capacity: self.commands.maximumRunning + options.otherProcesses)
        self.options = options
        charges = SentBytesCharges(quota: ReplyBytesQuota(limit: options.maximumReplyBytesPerUID), access: options.access)
        tree = ObjectTree(connection: connection)
        // Checks need the caller's credentials; the lookup it costs is skipped when all is allowed.
        // (They are forgotten on NameOwnerChanged, which matchRules already subscribes to.)
        tree.requiresCredentials = options.access.isEnabled
        // History names every caller, also without access checks: one lookup per connection.
        tree.attributesCalls = options.recordsCallers
        // A binding acts with its principal's rights at every propagation, not only at Bind.
        model.bindingAuthority = BindingAuthority.enforcing(options.access)
        model.bindingStateHandler = { Self.log(Self.bindingStateLine($0, $1)) }
        tree.maximumMessageSize = model.limits.maximumMessageSize
        tree.replyTooLarge = { call, size, limit in Self.replyTooLarge(call, size: size, limit: limit) }
        tree.onOversizedSignal = { Self.log($0) }
        tree.accessCheck = { [unowned self] access, call throws(DBusError) in try check(access, call) }
        tree.replyAdmission = { [unowned self] call, credentials, size in charges.admitReply(to: call, of: size, caller: credentials) }
        tree.callAdmission = { [unowned self] call, isWrite in charges.admitCall(call, isWrite: isWrite) }
        tree.signalCharges.charge = { [unowned self] causes, size in charges.chargeSignal(causedBy: causes, size: size) }
        tree.signalCharges.maximumValueSize = options.maximumSignalledValueSize
        connection.backlog.limit = options.maximumBusHeldBytes
        // Model files have declared their keys by now: stored overrides find them.
        model.adoptLoadedLeases()
        if let history, history.recordsDenied {
            tree.onRefusal = { [unowned self] call, error in recordRefusal(of: call, error, in: history) }
        }
        tree.addObjectManager(at: Key.rootPath)
        tree.export(ExportedObject { [unowned self] in [managerDescription()] }, at: Key.rootPath)
        // Before the name is owned: no InterfacesAdded (see ObjectTree.export), which at start-up
        // meant building every group's property table and values only to send them to no one.
        for group in model.groupNames { exportGroup(group, announce: false) }
        for binding in model.bindings.all { exportBinding(binding, announce: false) }
        tree.addBeforeFlushHook { [unowned self] in commit() }
        // Weak: the connection holds this handler and may outlive the service.
        connection.addSignalHandler(matching: Self.matchRules[0]) { [weak self] message in
            // A connection that leaves the bus ends its non-persistent bindings.
            guard let self, let args = try? message.arguments(), args.count == 3,
                  let name = args[0].stringValue, name.hasPrefix(":"), args[2].stringValue == "" else { return }
            publish(model.unbindAll(ownedBy: name))
            // Its overrides end and its ephemeral keys go (those with a TTL stay until it ends).
            endLeases(heldBy: name)
            describedCallers[name] = nil
            // An Execute whose caller left can never be answered, and its id was never handed
            // out, so nobody could cancel it: cancel it now.
            for (id, work) in running.sorted(by: { $0.key < $1.key }) where work.waiter?.sender == name {
                cancelExecution(id, of: work.execution.command, reason: PropBusError(
                    .cancelled, "execution \(id) of command \(work.execution.command) was cancelled: its caller \(name) left the bus before the reply"))
            }
            // A handler that leaves fails its running executions and disables its commands.
            let (ended, changes) = self.commands.handlerLeft(name)
            publish(changes)
            for execution in ended {
                finishExecution(execution.id, of: execution.command, .failure(PropBusError(
                    .handlerVanished, "the handler of command \(execution.command) left the bus during execution \(execution.id)").dbusError))
            }
        }
    }

    /// `LimitsExceeded` for a reply too big for one message, saying how to ask for less.
    static func replyTooLarge(_ call: Message, size: MessageSize, limit: Int) -> DBusError {
        let member = call.member ?? "the call"
        let hint: String
        switch member {
        case "GetManagedObjects": hint = "read one group at a time (Properties.GetAll on its object) or list a prefix (ListProperties)"
        case "ListProperties", "ListPropertiesCompact": hint = "list a longer prefix, e.g. one group (\"group.\")"
        case "GetAll": hint = "read the properties one by one (Properties.Get)"
        case "Introspect": hint = "introspect one group's object instead of the tree"
        case "ListBindings": hint = "page through ListBindingsPage (prefix, after, limit) instead"
        case "ListUnclaimed": hint = "page through ListUnclaimedPage (prefix, after, limit) instead"
        default: hint = "ask for less at once"
        }
        let excess = size.excess(over: limit) ?? "is too big"
        let option = size.bytes > limit ? " (--max-message-size)" : ""
        return PropBusError(.limitsExceeded, "the reply to \(member) \(excess)\(option); \(hint)").dbusError
    }

    /// The log line for a binding suspended for `reason`, or resumed (`nil`). Names keys and
    /// uids, never a value.
    public static func bindingStateLine(_ binding: Binding, _ reason: String?) -> String {
        let who = binding.principal.map { "of uid \($0) " } ?? ""
        let what = "binding \(binding.id) (\(binding.key) ↔ \(binding.to)) \(who)"
        guard let reason else { return what + "resumed: its principal may read and write its keys again" }
        return what + "suspended: \(reason)"
    }

    /// A line in the daemon's ``Log``.
    package static func log(_ text: String) { Log.info(text) }

    /// Makes the round's writes durable before its replies and signals go out.
    ///
    /// If the store cannot commit, the model goes back to the last commit and the round's
    /// writes are answered with `StoreFailed` (by the tree); reads go on working.
    package func commit() -> DBusError? {
        // After the rollback below too, which may export groups again.
        defer { groupsExportedThisRound.removeAll() }
        guard !holdsCommits else { return nil }
        // Refused attempts after the round's own commit, in a transaction of their own; and
        // history past its bounds is pruned later, between rounds.
        defer {
            flushRefusals()
            scheduleHistoryPruning()
        }
        // A commit that writes counts as work too: 10,000 one-key rounds (a host offering its
        // model file's keys to the gate's owner) leave as much behind as one round of 10,000 changes.
        // Rounds that only read do not: a client polling a property would keep a burst's
        // memory from ever being looked at again.
        let writes = model.storeChanges.hasWrites
        guard let rollback = round.end() else {
            if writes { freeMemory.count(1) }
            if freeMemory.becameDue() { scheduleFreeMemoryLook() }
            return nil
        }
        let error = rollback.error
        storeFailureHandler?(error)
        let touched = rollback.touchedKeys
        let orphaned = rollback.orphanedExecutions
        // Groups created or emptied in the round were exported or unexported; undo that too.
        // The tree drops the signals this queues, with the rest of the round's.
        for group in Set(touched.map(\.group)) {
            let exported = tree.object(at: Key.objectPath(ofGroup: group)) != nil
            let exists = !model.names(inGroup: group).isEmpty
            if exists, !exported { exportGroup(group) }
            if !exists, exported { tree.unexport(Key.objectPath(ofGroup: group)) }
        }
        let current = Set(model.bindings.all.map(\.id))
        for id in exportedBindings.subtracting(current) { unexportBinding(id) }
        for binding in model.bindings.all where !exportedBindings.contains(binding.id) { exportBinding(binding) }
        // Executions went on regardless; once this round's signals are dropped, bring the
        // state keys back in line with them and announce that in a round of its own.
        later { service in
            for execution in orphaned {
                service.cancelExecution(execution.id, of: execution.command, reason: PropBusError(.storeFailed, "command \(execution.command) was rolled back: \(error.message)"))
            }
            service.publish(service.commands.reassertState())
            // The rollback may have brought back (or taken away) a lease with a TTL.
            service.armLeaseTimer()
            service.tree.connection.scheduleRound()
        }
        return error.dbusError
    }

    /// Runs a write call's model work and publishes it, or, with a gate whose keys it writes,
    /// lets the gate send it first and answer later (see ``WriteGate/route(_:compareAndSet:rerunAfterCommit:reply:_:)``).
    /// `reply` is evaluated once the writes are in the model.
    func write(_ call: MethodCall, compareAndSet: Bool = false, rerunAfterCommit: Bool = false, via: String? = nil, reply: @escaping () -> [DBusValue] = { [] },
               _ body: @escaping () throws(PropBusError) -> [PropertyChange]) throws(DBusError) -> MethodResult {
        // The round's write set names the call as the origin of what it changes (history);
        // what the daemon does after it is its own again.
        model.origin = origin(of: call, via: via)
        defer { model.origin = .daemon }
        guard let gate else {
            publish(try bridged(body))
            return .reply(reply())
        }
        return try gate.route(call, compareAndSet: compareAndSet, rerunAfterCommit: rerunAfterCommit, reply: reply) { () throws(PropBusError) in
            WriteRun(changes: try body())
        }
    }

    /// ``write(_:compareAndSet:rerunAfterCommit:via:reply:_:)`` for a call whose reply is made by
    /// its model work (the binding `Bind` made): the reply of the run that counts, which with a
    /// gate may be a later one than the first (`rerunAfterCommit`).
    func write(_ call: MethodCall, rerunAfterCommit: Bool, replying body: @escaping () throws(PropBusError) -> WriteRun) throws(DBusError) -> MethodResult {
        model.origin = origin(of: call)
        defer { model.origin = .daemon }
        guard let gate else {
            let run = try bridged(body)
            publish(run.changes)
            return .reply(run.reply ?? [])
        }
        return try gate.route(call, compareAndSet: false, rerunAfterCommit: rerunAfterCommit, reply: { [] }, body)
    }

    /// Who made `call`, for the round's write set: the method, the bus name, and from the
    /// caller's credentials (looked up once per connection, with or without access checks) its
    /// uid, user name, pid and process, read from `/proc` at the connection's first write (the
    /// process may be gone by the time someone reads history).
    /// - Parameter credentials: the caller's, when looked up for this call only (the tree's
    ///   otherwise).
    package func origin(of call: MethodCall, via: String? = nil, credentials: Credentials? = nil) -> WriteSet.Origin {
        let method = via ?? call.message.member ?? "call"
        var described: WriteSet.Caller
        if let known = describedCallers[call.sender] {
            described = known
        } else {
            let identity = credentials ?? call.identity ?? call.credentials
            described = WriteSet.Caller(via: "", busName: call.sender, userID: identity?.userID, processID: identity?.processID)
            if options.recordsCallers {
                described = CallerProcess.describe(described)
                if !call.sender.isEmpty { describedCallers[call.sender] = described }
            }
        }
        described.via = method
        return via == "Revert" ? .revert(described) : .call(described)
    }

    /// This service, for work that hops back to its queue (a timer, a process's end, a later
    /// step): held weakly, and checked to be opened on the queue only, the service not being
    /// `Sendable` (its state is the queue's). Make it on the queue.
    var bound: LoopBound<WeakReference<Service>> { LoopBound(weak: self, on: tree.connection.queue) }

    /// Runs `body` on the queue later (after `deadline`, if given), if the service still exists
    /// then. Call on the queue.
    func later(_ deadline: DispatchTime? = nil, _ body: @escaping @Sendable (Service) -> Void) {
        bound.async(after: deadline, body)
    }

    /// Lets rounds commit again and commits what was held back (see ``holdsCommits``).
    public func releaseCommits() throws(DBusError) {
        holdsCommits = false
        if let error = commit() { throw error }
    }

    /// Turns model changes into exported objects and coalesced signals, with the command
    /// state they change in turn (predicates that read a changed key).
    package func publish(_ changes: [PropertyChange]) {
        publishOnly(changes)
        if !changes.isEmpty { publishOnly(commands.refresh(after: changes)) }
        freeMemory.count(changes.count)
    }

    /// After the quiet period: releases if no more work came meanwhile (the burst and its
    /// callers' transient data, such as a full read's answer, are gone by then), else looks
    /// again after another period.
    private func scheduleFreeMemoryLook() {
        later(freeMemoryQuietPeriod == .seconds(0) ? nil : .now() + freeMemoryQuietPeriod) { service in
            guard service.freeMemory.isQuiet() else { return service.scheduleFreeMemoryLook() }
            service.releaseFreeMemory()
            service.freeMemory.released()
        }
    }

    private func publishOnly(_ changes: [PropertyChange]) {
        for change in changes {
            let key = change.key
            let path = key.objectPath
            switch change {
            case .created:
                if tree.object(at: path) == nil {
                    exportGroup(key.group)
                } else if !groupsExportedThisRound.contains(key.group) {
                    // A new property of an existing group: announce it to cached proxies.
                    tree.noteChange(path: path, interface: Self.valuesInterface, property: key.name, oldValue: nil)
                }
            case .redefined:
                break
            case .valueChanged(_, let old):
                // A group exported this round is announced whole, with its values at the flush.
                if groupsExportedThisRound.contains(key.group) { continue }
                tree.noteChange(path: path, interface: Self.valuesInterface, property: key.name, oldValue: old)
                if model.definition(for: key)?.stateOf != nil {
                    tree.noteChange(path: path, interface: Self.commandInterface, property: key.name, oldValue: old)
                }
            case .deleted(_, let old):
                // Cached proxies must drop the name (invalidated), also when the group goes
                // with its last key: the tree invalidates what was noted before the object goes.
                tree.noteChange(path: path, interface: Self.valuesInterface, property: key.name, oldValue: old)
                if model.names(inGroup: key.group).isEmpty { tree.unexport(path) }
            case .bound(let binding):
                exportBinding(binding)
            case .unbound(let binding):
                unexportBinding(binding.id)
            }
        }
    }

    private func exportBinding(_ binding: Binding, announce: Bool = true) {
        exportedBindings.insert(binding.id)
        tree.export(ExportedObject { [unowned self] in [bindingDescription(binding)] }, at: Self.path(ofBinding: binding.id), announce: announce)
    }

    private func unexportBinding(_ id: UInt64) {
        exportedBindings.remove(id)
        tree.unexport(Self.path(ofBinding: id))
    }

    private func exportGroup(_ group: String, announce: Bool = true) {
        // Its InterfacesAdded, built at the flush, carries every property added this round.
        if announce { groupsExportedThisRound.insert(group) }
        // A command's group holds its state keys; its object also carries the Command interface.
        let command = try? Key(group)
        tree.export(ExportedObject { [unowned self] in
            guard let command, commands.definition(of: command) != nil else { return [valuesDescription(group: group)] }
            return [valuesDescription(group: group), commandDescription(command)]
        }, at: Key.objectPath(ofGroup: group), announce: announce)
    }
}

/// One run of a write call's model work: the changes it made and, when the call's reply depends
/// on the run (the binding `Bind` made), that reply, as a value: a ``WriteGate`` may run the
/// work again once its keys' owner accepted it, and the reply must name what that run made.
public struct WriteRun {
    /// What the run changed in the model.
    public var changes: [PropertyChange]
    /// `nil`: the call's own `reply`, evaluated once the writes are in the model.
    public var reply: [DBusValue]? = nil

    /// A run that changed `changes` and, unless `nil`, replies `reply`.
    public init(changes: [PropertyChange], reply: [DBusValue]? = nil) {
        self.changes = changes
        self.reply = reply
    }
}
