import DBus
import Dispatch
import Etcd
import PropBus
import PropBusService
import Synchronization
import SystemKit

/// The fleet's write path: the shell around ``FleetMachine``, which decides the order; here
/// the model work is run, txns go to etcd on the ``Fleet/lanes`` and their results are applied.
extension Fleet {
    /// A call whose fleet writes the machine holds.
    struct PendingWrite {
        var call: MethodCall
        var compareAndSet: Bool
        /// Run the model work again, locally, once its fleet writes are in (Bind: the binding
        /// itself is this host's, only the value its first sync wrote is the fleet's).
        var rerunAfterCommit: Bool
        var reply: () -> [DBusValue]
        var body: () throws(PropBusError) -> WriteRun
        /// The reply the last run made, when the call's reply depends on its run (``WriteRun/reply``).
        var replyOfLastRun: [DBusValue]?
        /// The call's first run, still the mirror as it is when its turn comes at once.
        var fresh: Probe?
        /// The fleet keys its first run wrote, named by its errors before it is sent.
        var keys: [Key]
        /// The touched keys' entries as the call left them, at its last turn.
        var after: [Key: PropertyModel.Entry?] = [:]
        var plan = FleetLayout.Transaction()
        /// What to answer instead of the reply once committed (a Bind's run after the commit failed).
        var failureAfterCommit: PropBusError?
        /// The store's refusal of the commit after etcd accepted the txn.
        var commitError: DBusError?
    }

    /// Txn outcomes on their way from the lanes to the D-Bus queue (``deliver(_:lane:_:)``).
    struct Arrivals: Sendable {
        var outcomes: [(id: UInt64, lane: Int, outcome: FleetMachine.TxnOutcome)] = []
        /// A lane is handing them over: the others leave theirs here for it.
        var delivering = false
    }

    /// What a call's model work did: nothing to fleet keys (kept in the round and published, with
    /// the reply the run made, if it makes one), or fleet keys written (taken back out of the
    /// round: their before and after states).
    enum Probe {
        case local(reply: [DBusValue]?)
        case fleet(before: [Key: PropertyModel.Entry?], after: [Key: PropertyModel.Entry?], read: Set<Key>)
    }

    /// Runs `body` inside a savepoint of the round (the model's call log, with its rows to
    /// store). No fleet key changed: the changes stay and are published. Otherwise the call is
    /// undone and its effect returned.
    func probe(_ body: () throws(PropBusError) -> WriteRun) throws(PropBusError) -> Probe {
        let model = service.model
        let call = model.savepoint()
        let run: WriteRun
        do { run = try body() } catch {
            model.rollback(to: call)
            throw error
        }
        let (before, read) = model.changes(since: call)
        let touchesFleet = before.contains { key, old in
            old?.definition.scope == .fleet || model.entry(for: key)?.definition.scope == .fleet
        }
        guard touchesFleet else {
            model.release(call)
            service.publish(run.changes)
            return .local(reply: run.reply)
        }
        var after: [Key: PropertyModel.Entry?] = [:]
        for key in before.keys { after.updateValue(model.entry(for: key), forKey: key) }
        model.rollback(to: call)
        return .fleet(before: before, after: after, read: read)
    }

    /// The keys a probed write touches, for the machine's independence check.
    private func footprint(before: [Key: PropertyModel.Entry?], read: Set<Key>) -> FleetMachine.Footprint {
        let model = service.model
        return FleetMachine.Footprint(written: Set(before.keys),
                                      read: read.filter { before[$0] == nil && model.entry(for: $0)?.definition.scope == .fleet })
    }

    /// Runs a write call's model work. A call that changed no fleet key is kept in the round as
    /// usual. One that did is taken back out of the round and handed to the ``FleetMachine``:
    /// writes independent of those with etcd are sent at once (up to
    /// ``FleetMachine/maximumInFlight`` txns; those whose turn comes together share one), one
    /// that depends on a write with etcd waits for that one's answer and is computed again (its
    /// model work run again) then. Its turn come, it becomes its part of an etcd transaction
    /// (compares on the etcd revisions of every fleet key it writes or its bindings read, then
    /// the puts and deletes); its reply waits, the D-Bus queue does
    /// not. When etcd accepted it, the call's result is applied and committed here, and the call
    /// answered; when a compare failed (another host wrote first), the mirror is refreshed from
    /// the failure branch and a plain write is tried again (at most
    /// ``FleetMachine/maximumAttempts`` times: the last writer in etcd's order wins), while
    /// `CompareAndSet` fails with `Conflict`. When etcd cannot be reached, or FleetState is not
    /// connected: `Unavailable`.
    func write(_ call: MethodCall, compareAndSet: Bool, rerunAfterCommit: Bool, reply: @escaping () -> [DBusValue],
               _ body: @escaping () throws(PropBusError) -> WriteRun) throws(DBusError) -> MethodResult {
        dispatchPrecondition(condition: .onQueue(queue))
        // Run now, so a bad call is refused at once and a local one is served as without the fleet.
        let probed = try bridged { () throws(PropBusError) in try probe(body) }
        let before: [Key: PropertyModel.Entry?], after: [Key: PropertyModel.Entry?], read: Set<Key>
        switch probed {
        case .local(let ran): return .reply(ran ?? reply())
        case .fleet(let touched, let made, let seen): (before, after, read) = (touched, made, seen)
        }
        let keys = Set(before.keys).union(after.keys).filter {
            (before[$0] ?? nil)?.definition.scope == .fleet || (after[$0] ?? nil)?.definition.scope == .fleet
        }.sorted()
        // Connecting (just started, or reading etcd again): the write waits for the connection.
        guard state == .connected || state == .connecting else {
            throw unavailable(keys, because: "FleetState is \(state.rawValue)").dbusError
        }
        let id = nextID
        nextID += 1
        writes[id] = PendingWrite(call: call, compareAndSet: compareAndSet, rerunAfterCommit: rerunAfterCommit,
                                  reply: reply, body: body, fresh: probed, keys: keys)
        feed(.write(id, footprint(before: before, read: read), compareAndSet: compareAndSet,
                    now: DispatchTime.now().uptimeNanoseconds))
        // Used at once if its turn came now; otherwise what it computed is stale by its turn.
        writes[id]?.fresh = nil
        return .deferred
    }

    /// Hands `event` to the machine and runs its actions; an event raised while actions run
    /// waits its turn, so the machine sees events in the order they happened.
    func feed(_ event: FleetMachine.Event) {
        dispatchPrecondition(condition: .onQueue(queue))
        inbox.append(event)
        guard !feeding else { return }
        feeding = true
        defer { feeding = false }
        while !inbox.isEmpty {
            let next = inbox.removeFirst()
            for action in machine.handle(next) { perform(action) }
        }
    }

    private func perform(_ action: FleetMachine.Action) {
        switch action {
        case .prepare(let id, let attempt, _):
            prepare(id, attempt: attempt)
        case .send(let ids, let resendable, let deadline):
            send(ids, resendable: resendable, deadline: deadline)
        case .apply(let id, let response):
            // nil: applied, its commit waits for the batch's end (commitAnswers).
            if let outcome = applyAnswer(id, response) { feed(.applied(id, outcome)) }
        case .refresh(let id, let response):
            refresh(id, from: response)
        case .retry(let id, let microseconds):
            later(.now() + .microseconds(microseconds)) { $0.feed(.retryDue(id, now: DispatchTime.now().uptimeNanoseconds)) }
        case .reply(let id):
            guard let write = writes.removeValue(forKey: id) else { return }
            if let failure = write.failureAfterCommit {
                write.call.fail(failure.dbusError)
            } else {
                write.call.reply(write.replyOfLastRun ?? write.reply())
            }
            // The signals and the reply go out now, not after a round scheduled behind this
            // answer (after a batch's commit: once, for every reply of the batch).
            if !flushAfterReplies { service.tree.flushNow() }
        case .fail(let id, let failure):
            guard let write = writes.removeValue(forKey: id) else { return }
            write.call.fail(error(failure, of: write))
        case .applyUpdate(let generation, let update):
            guard generation == watchGeneration, !stopped else { return }
            // Its commit (a progress notification's cursor, a round) would take the answers applied before it.
            commitAnswers()
            handle(update)
        case .wake(let uptime):
            later(DispatchTime(uptimeNanoseconds: uptime)) { $0.feed(.tick(DispatchTime.now().uptimeNanoseconds)) }
        case .markUnreachable:
            markUnreachable()
        case .readAll(let rewind):
            if !rewinding { rewound(rewind) }
        }
    }

    /// Computes the write on the mirror as it is now (its first run, if that still is) and
    /// builds its txn; tells the machine, or answers the call when it no longer writes fleet keys.
    private func prepare(_ id: UInt64, attempt: Int) {
        // The machine sends nothing while a write is being prepared: it must hear of each.
        guard var write = writes[id] else { return feed(.settledLocally(id)) }
        let model = service.model
        do throws(PropBusError) {
            let probed: Probe
            if let fresh = write.fresh { probed = fresh } else { probed = try probe(write.body) }
            write.fresh = nil
            let before: [Key: PropertyModel.Entry?], after: [Key: PropertyModel.Entry?], read: Set<Key>
            switch probed {
            case .local(let ran):
                // A local write now in the round: the batch's commit must wait for the disk.
                awaitingCommitIsMirrorOnly = false
                writes[id] = nil
                write.call.reply(ran ?? write.reply())
                feed(.settledLocally(id))
                return
            case .fleet(let touched, let made, let seen): (before, after, read) = (touched, made, seen)
            }
            // After three lost races a plain write stops comparing its own values (see
            // FleetLayout.transaction): otherwise a host writing flat out could starve this one.
            write.plan = try layout.transaction(before: before, after: after, read: read,
                                                comparingWrittenValues: write.compareAndSet || attempt <= FleetMachine.attemptsComparingValues,
                                                attribution: attribution(of: write.call), time: Self.now(),
                                                isFleet: { model.entry(for: $0)?.definition.scope == .fleet },
                                                known: { [unowned self] in revisions[$0] ?? FleetRevisions() })
            // An ephemeral fleet key's puts stay attached to its etcd lease (Fleet+Leases.swift).
            write.plan = attachingLifetimes(to: write.plan)
            write.after = after
            writes[id] = write
            var footprint = footprint(before: before, read: read)
            footprint.written.formUnion(write.plan.written)
            let plan = write.plan, deleter = layout.deleterKey
            let size = FleetMachine.Size(compares: plan.compares.count, operations: plan.success.count, bytes: plan.requestBytes,
                                         alone: plan.success.contains { if case .put(let put) = $0 { put.key == deleter } else { false } })
            feed(.prepared(id, footprint, size: size, cursor: rewindFloor, clusterID: source.flatMap(FleetRewind.clusterID(ofSource:)), terms: raftTerms))
        } catch {
            writes[id] = nil
            write.call.fail(error.dbusError)
            feed(.settledLocally(id))
        }
    }

    /// Sends the prepared writes on a free lane as one txn, the union of their txns (their keys
    /// are disjoint: the machine sends together only independent writes); its answer goes to
    /// the machine under the first one's id.
    private func send(_ ids: [UInt64], resendable: Bool, deadline: UInt64?) {
        guard let first = ids.first, let lane = freeLanes.popLast() else { return }
        var union = FleetLayout.Transaction()
        for id in ids {
            guard let own = writes[id]?.plan else { continue }
            union.compares += own.compares
            union.success += own.success
            // A txn of several writes that fails is split, not refreshed from (etcd does not say
            // whose compare failed): it needs no failure branch, which etcd would parse per key.
            if ids.count == 1 { union.failure = own.failure }
        }
        let plan = union, client = client
        // A write that waited for the connection has what is left of its bound, not a new one.
        let timeout = deadline.flatMap { Self.remaining(until: DispatchTime(uptimeNanoseconds: $0)) }
        let fleet = bound, queue = queue, arrivals = arrivals
        // Started here when the port can without waiting: the txn is with etcd now, and the
        // lane's thread wakes up only to wait for its answer.
        let started = txnLanes[lane].flatMap { starter in
            starter.start(compares: plan.compares, success: plan.success, failure: plan.failure,
                          resendIfConnectionLost: resendable, timeout: timeout) ? starter : nil
        }
        lanes[lane].async {
            let outcome: FleetMachine.TxnOutcome
            do throws(EtcdError) {
                if let started {
                    outcome = .answered(try started.finish())
                } else {
                    outcome = .answered(try client.txn(compares: plan.compares, success: plan.success, failure: plan.failure,
                                                       resendIfConnectionLost: resendable, timeout: timeout))
                }
            } catch {
                outcome = .failed(error)
            }
            Self.deliver(first, lane: lane, outcome, through: arrivals, to: fleet, on: queue)
        }
    }

    /// Hands a txn's outcome to the D-Bus queue (on its lane's thread). Outcomes that arrive
    /// while another lane is handing some over are left for that lane, which takes them with
    /// its own: one turn of the D-Bus queue and **one commit** for every write they answer
    /// (group commit), instead of a turn and a commit each while the queue is busy anyway.
    private static func deliver(_ id: UInt64, lane: Int, _ outcome: FleetMachine.TxnOutcome, through arrivals: FleetArrivals,
                                to fleet: LoopBound<WeakReference<Fleet>>, on queue: DispatchQueue) {
        let delivers = arrivals.state.withLock { arrivals in
            arrivals.outcomes.append((id, lane, outcome))
            if arrivals.delivering { return false }
            arrivals.delivering = true
            return true
        }
        guard delivers else { return }
        // sync: libdispatch runs it right here when the D-Bus queue is idle, saving a
        // thread wake-up per write. Safe: the D-Bus queue never waits for a lane.
        queue.sync {
            // Until none is left: one left after the last look would wait for the next answer.
            while true {
                let batch = arrivals.state.withLock { arrivals in
                    defer { arrivals.outcomes = [] }
                    if arrivals.outcomes.isEmpty { arrivals.delivering = false }
                    return arrivals.outcomes
                }
                if batch.isEmpty { return }
                // A stopped fleet's answers are drained all the same, so `delivering` ends.
                fleet.object()?.handleAnswers(batch)
            }
        }
    }

    /// The machine gets each outcome in turn; the writes etcd accepted are applied as they
    /// come and committed together at the end, then answered.
    private func handleAnswers(_ batch: [(id: UInt64, lane: Int, outcome: FleetMachine.TxnOutcome)]) {
        dispatchPrecondition(condition: .onQueue(queue))
        for answer in batch { freeLanes.append(answer.lane) }
        handlingAnswers = true
        for answer in batch {
            feed(.txnAnswered(answer.id, answer.outcome))
            // After the machine's check, which judges by the terms known when it was sent
            // (and may have forgotten them: etcd went back in time).
            if case .answered(let response) = answer.outcome {
                FleetRewind.note(response.header, in: &raftTerms)
                highestRevision = max(highestRevision, response.header.revision)
            }
        }
        handlingAnswers = false
        commitAnswers()
    }

    /// Commits the writes applied since the last commit (``awaitingCommit``) and tells the
    /// machine, which answers their calls: all replies after the one commit that holds them,
    /// then one flush.
    func commitAnswers() {
        guard !awaitingCommit.isEmpty else { return }
        let done = awaitingCommit
        awaitingCommit = []
        if awaitingCommitIsMirrorOnly { service.model.storeChanges.durability = .replayable }
        awaitingCommitIsMirrorOnly = true
        let error = service.commit()
        if error == nil { for write in done { revisions.merge(write.revisions) { $1 } } }
        flushAfterReplies = true
        for write in done {
            writes[write.id]?.commitError = error
            feed(.applied(write.id, error == nil ? .committed : .commitFailed))
        }
        flushAfterReplies = false
        service.tree.flushNow()
    }

    /// The time left until `deadline` (at least 100 ms, so a txn can be sent at all), or nil for
    /// a write that never waited.
    static func remaining(until deadline: DispatchTime) -> Duration? {
        guard deadline != .distantFuture else { return nil }
        let now = DispatchTime.now().uptimeNanoseconds, end = deadline.uptimeNanoseconds
        return max(.nanoseconds(Int64(end > now ? end - now : 0)), .milliseconds(100))
    }

    func unavailable(_ keys: [Key], because reason: String) -> PropBusError {
        let names = keys.map(\.text).joined(separator: ", ")
        return PropBusError(.unavailable, "cannot write fleet key \(names): etcd (\(configuration.endpoints.joined(separator: ", "))) is unavailable: \(reason); local keys can still be written")
    }

    /// The error a call gets for `failure`.
    private func error(_ failure: FleetMachine.Failure, of write: PendingWrite) -> DBusError {
        let keys = write.plan.written.isEmpty ? write.keys : write.plan.written
        let names = keys.map(\.text).joined(separator: ", ")
        switch failure {
        case .connectionWaitOver(let state):
            return unavailable(keys, because: "FleetState stayed \(state.rawValue) for the request timeout while the write waited").dbusError
        case .becameUnavailable:
            return unavailable(keys, because: "FleetState became unavailable while the write waited for the connection").dbusError
        case .txn(let code, let message):
            let reason = code == .timedOut
                ? "no answer within the request timeout (the write may or may not have been applied; the watch will tell): \(message)"
                : message
            return unavailable(keys, because: reason).dbusError
        case .earlierWriteFailed(let message):
            return unavailable(keys, because: "the write before this one failed: \(message)").dbusError
        case .compareAndSetConflict:
            return PropBusError(.conflict, "fleet key \(names) was changed by another host since the given revision; read it again and retry").dbusError
        case .attemptsExhausted:
            if write.rerunAfterCommit {
                return PropBusError(.conflict, "the keys of \(names) kept changing under \(FleetMachine.maximumAttempts) attempts; try again").dbusError
            }
            return PropBusError(.conflict, "fleet key \(names) kept changing under \(FleetMachine.maximumAttempts) attempts to write it; try again").dbusError
        case .commitFailed:
            // etcd has it; the watch brings it back once the store can commit again.
            return write.commitError ?? PropBusError(.unavailable, "fleet key \(names) is in etcd but could not be committed here").dbusError
        }
    }

    /// Another host changed a compared key first: the failure branch read them all.
    private func refresh(_ id: UInt64, from response: TxnResponse) {
        guard let plan = writes[id]?.plan else { return }
        var events: [WatchEvent] = []
        for (index, op) in response.responses.enumerated() {
            guard case .range(let range) = op, index < plan.failure.count, case .range(let request) = plan.failure[index] else { continue }
            if let kv = range.kvs.first {
                events.append(WatchEvent(kind: .put, kv: kv))
            } else {
                events.append(WatchEvent(kind: .delete, kv: KeyValue(key: request.key, modRevision: range.header.revision)))
            }
        }
        apply(events, through: nil)
    }

    /// Applies a write etcd accepted, commits, and says how that ended; nil while a batch of
    /// answers is handled: its commit is the batch's (``commitAnswers()``).
    ///
    /// Such a commit holds only what etcd keeps durably (the fleet keys' values, their etcd
    /// revisions): it need not wait for the disk. After a crash (or power loss) the local copy
    /// of a fleet key may lag behind what was acknowledged, never ahead, and the watch replays
    /// it from the cursor committed with it: nothing acknowledged is lost, etcd holds it.
    private func applyAnswer(_ id: UInt64, _ response: TxnResponse) -> FleetMachine.ApplyOutcome? {
        guard var write = writes[id] else { return .commitFailed }
        // A write whose commit cannot wait: a Bind runs again after it, and a definition may
        // end bindings. The answers applied before it are committed first, on their own.
        let joinsBatch = handlingAnswers && !write.rerunAfterCommit && write.plan.writesDefinition.isEmpty
        if !joinsBatch { commitAnswers() }
        let revision = response.header.revision
        let model = service.model
        // A write of fleet keys only (nothing local in the call). Nothing local may wait in the
        // store either; in a batch, what waits is the batch's own fleet writes.
        let fleetOnly = write.after.allSatisfy { key, entry in
            (entry ?? nil)?.definition.scope == .fleet || (entry == nil && write.plan.written.contains(key))
        }
        let storeHoldsNoLocalWrite = joinsBatch && !awaitingCommit.isEmpty
            || !model.storeChanges.hasOwnWrites
        let mirrorOnly = storeHoldsNoLocalWrite && fleetOnly
        var changes: [PropertyChange] = []
        // History names the call (and this host) as the origin of what etcd accepted.
        if let caller = attribution(of: write.call) { model.origin = .call(caller) }
        changes += model.apply(after: write.after)
        defer { model.origin = .daemon }
        // A local key this write made a fleet key may be driven by a command's state: that
        // binding ends, as when another host's definition makes it one (``apply(_:through:)``).
        let unbound = write.plan.writesDefinition.isEmpty ? [] : endBindingsOfStateToFleetKeys()
        changes += unbound
        var updated: [Key: FleetRevisions] = [:]
        for key in write.plan.written {
            var known = revisions[key] ?? FleetRevisions()
            let entry = write.after[key] ?? nil
            if write.plan.writesDefinition.contains(key) { known.definition = entry == nil ? -revision : revision }
            if write.plan.writesValue.contains(key) { known.value = entry?.storedValue == nil ? -revision : revision }
            updated[key] = known
            model.storeChanges.saveExternalRevisions(known, for: key)
        }
        service.publish(changes)
        if joinsBatch {
            awaitingCommitIsMirrorOnly = awaitingCommitIsMirrorOnly && mirrorOnly
            awaitingCommit.append((id, updated))
            writes[id] = write
            return nil
        }
        var again = false
        if write.rerunAfterCommit {
            // Run as a call again: its fleet writes are in, unless a local key it reads changed
            // while the txn was out (a Set served meanwhile). Then what it would write now goes
            // to etcd too, as another attempt, instead of onto this host alone.
            do throws(PropBusError) {
                switch try probe(write.body) {
                case .fleet: again = true
                case .local(let ran): write.replyOfLastRun = ran
                }
            } catch {
                write.failureAfterCommit = error
            }
        }
        if mirrorOnly, unbound.isEmpty, !write.rerunAfterCommit { model.storeChanges.durability = .replayable }
        if let error = service.commit() {
            write.commitError = error
            writes[id] = write
            return .commitFailed
        }
        revisions.merge(updated) { $1 }
        writes[id] = write
        if again { service.tree.flushNow() }
        return again ? .again : .committed
    }
}

/// The txn outcomes on their way from the lanes to the D-Bus queue, behind a mutex: the one
/// piece of the fleet the lanes' threads touch (``Fleet/arrivals``).
final class FleetArrivals: Sendable {
    let state = Mutex(Fleet.Arrivals())

    /// How many txn answers wait for the D-Bus queue (tests: to know they all came back).
    var waiting: Int { state.withLock { $0.outcomes.count } }
}
