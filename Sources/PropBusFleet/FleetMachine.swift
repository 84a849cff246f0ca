import Etcd
import PropBus

/// The fleet's write path and watch ordering as a pure state machine: events in, actions out,
/// no I/O, no model, no clock of its own (the time comes with the events). ``Fleet`` is the
/// shell that runs the actions (probing a call's model work, sending txns through its
/// ``EtcdPort``, applying and committing) and feeds back what happened; the tests drive it
/// with plain values against a fake etcd, every interleaving reachable.
///
/// **Independent writes in one txn.** A write is known by its *footprint*: the keys it writes
/// (fleet keys, and the local keys its bindings reach) and the fleet keys it reads. Writes whose
/// footprints are independent (neither writes what the other writes or reads) and whose turn
/// comes together (queued while the host's txn was with etcd) go to etcd as *one* txn, the
/// union of theirs, within etcd's bounds; at most ``maximumInFlight`` txns are out. Each write
/// keeps its own result: on success each is applied and answered on its own (at the txn's
/// revision); when a compare failed (etcd does not say whose) each is sent again alone, so a
/// conflict stays the conflicting write's. A write that depends on one in flight (or queued
/// before it) waits for that one's answer to be applied, so this host's order per key is kept
/// and no two answers of the same key can be applied out of etcd's order.
///
/// **Held watch updates.** An update touching a fleet key written by a txn that is out
/// (most often that txn itself, echoed before its answer) waits until the answer is applied,
/// and so does every update after it, in order. Applying it first would let the answer
/// (possibly at an older revision) overwrite a newer change; after the answer, the write's
/// own change is recognised by its revision.
struct FleetMachine: Sendable {
    typealias WriteID = UInt64

    /// At most this many txns of one host are with etcd at once (each takes a thread of the
    /// shell's and a connection to etcd). One: the writes that come while it is out wait and go
    /// together in the next, and etcd, as each host after it, works per txn and per revision
    /// more than per key (8 writers on one host: 3.6 Sets per txn and ~1.4× the Sets/s of two
    /// txns out, each Set costing etcd and both hosts less CPU; bench/README.md).
    static let maximumInFlight = 1
    /// How many times a plain write whose compare failed is refreshed and tried again.
    static let maximumAttempts = 10
    /// How many of them compare the values the write replaces.
    static let attemptsComparingValues = 3

    /// The keys a write touches.
    struct Footprint: Sendable, Equatable {
        /// Every key whose entry it changes (fleet keys, and the local keys its bindings reach).
        var written: Set<Key> = []
        /// The fleet keys its txn compares without writing them.
        var read: Set<Key> = []

        /// Whether the two cannot be with etcd together: one writes what the other touches.
        func depends(on other: Footprint) -> Bool {
            !written.isDisjoint(with: other.written) || !written.isDisjoint(with: other.read)
                || !other.written.isDisjoint(with: read)
        }
    }

    /// What a prepared write adds to a txn, to keep a txn of several writes within etcd's
    /// bounds (``FleetLayout/maximumOperations``, ``FleetLayout/maximumRequestBytes``).
    struct Size: Sendable, Equatable {
        /// Its compares (its txn's failure branch reads as many keys).
        var compares = 0
        /// Its puts and deletes.
        var operations = 0
        /// About how many bytes of the request it takes.
        var bytes = 0
        /// It must be its txn's only write: it puts the record of who deleted
        /// (``FleetLayout/deleterKey``), one key for the whole fleet, which two writes in one txn
        /// would each put (etcd refuses a txn that puts a key twice, and the record names one writer).
        var alone = false
    }

    /// How a txn's answer came back, as the shell's port reported it.
    enum TxnOutcome: Sendable {
        /// etcd answered; `succeeded` tells which branch ran.
        case answered(TxnResponse)
        /// No answer: `code` of the port's error (unreachable, timed out, refused…).
        case failed(EtcdError)
    }

    /// How the shell's application of a successful txn ended.
    enum ApplyOutcome: Sendable, Equatable {
        /// Committed here: the call is answered.
        case committed
        /// The store could not commit: etcd has it, the watch brings it back; the call fails.
        case commitFailed
        /// A Bind re-run found its local inputs changed meanwhile: another attempt goes to etcd.
        case again
    }

    /// Why a write is answered with an error.
    enum Failure: Sendable, Equatable {
        /// FleetState stayed not `connected` for the whole wait.
        case connectionWaitOver(Fleet.State)
        /// FleetState became `unavailable` while the write waited for the connection.
        case becameUnavailable
        /// Its own txn got no answer, or a refusal.
        case txn(EtcdError.Code, String)
        /// The write before it got no answer: it would wait as long again.
        case earlierWriteFailed(String)
        /// A CompareAndSet lost: the key changed since the given revision.
        case compareAndSetConflict
        /// A plain write lost ``maximumAttempts`` times in a row.
        case attemptsExhausted
        /// etcd has it, the store here could not commit it.
        case commitFailed
    }

    enum Action: Sendable, Equatable {
        /// Compute the write on the mirror as it is now (attempt `attempt`, its wait for the
        /// connection ending at `deadline`, nil if it never waited) and answer with
        /// ``Event/prepared(_:_:size:cursor:clusterID:terms:)`` or ``Event/settledLocally(_:)``.
        case prepare(WriteID, attempt: Int, deadline: UInt64?)
        /// Send the prepared writes as one txn, the union of theirs, answered with
        /// ``Event/txnAnswered(_:_:)`` naming the first (`resendable`: the port may send it again
        /// when its member dies under it; `deadline`: the earliest of their waits' ends).
        case send([WriteID], resendable: Bool, deadline: UInt64?)
        /// Apply the write's result (etcd accepted it), commit, then report ``Event/applied(_:_:)``.
        case apply(WriteID, TxnResponse)
        /// Refresh the mirror from a failed compare's reads.
        case refresh(WriteID, TxnResponse)
        /// Wake the machine with ``Event/retryDue(_:now:)`` after `microseconds`.
        case retry(WriteID, microseconds: Int)
        /// Answer the call with its reply.
        case reply(WriteID)
        /// Answer the call with an error.
        case fail(WriteID, Failure)
        /// Apply a watch update (of watch `generation`) as the mirror's round.
        case applyUpdate(generation: Int, WatchUpdate)
        /// Wake the machine with ``Event/tick(_:)`` at `uptime` (nanoseconds).
        case wake(at: UInt64)
        /// A write could not reach etcd: FleetState `unavailable` until a read answers.
        case markUnreachable
        /// etcd went back in time: read it all again (FleetState `connecting` meanwhile).
        case readAll(FleetRewind)
    }

    enum Event: Sendable {
        /// A call's first run wrote fleet keys (`footprint`); its reply waits.
        case write(WriteID, Footprint, compareAndSet: Bool, now: UInt64)
        /// The shell computed the write at its turn (``Action/prepare(_:attempt:deadline:)``):
        /// its footprint now, the cursor and cluster the mirror was at, and the raft term each
        /// etcd member answered with so far (``FleetRewind/check(_:cursor:clusterID:terms:)``).
        case prepared(WriteID, Footprint, size: Size = .init(), cursor: Int64, clusterID: UInt64?, terms: [UInt64: UInt64] = [:])
        /// At its turn the write touched no fleet key any more, or failed: answered by the shell.
        case settledLocally(WriteID)
        /// The txn sent first with `WriteID` (``Action/send(_:resendable:deadline:)``) came back.
        case txnAnswered(WriteID, TxnOutcome)
        case applied(WriteID, ApplyOutcome)
        case retryDue(WriteID, now: UInt64)
        /// A watch update arrived (watch `generation`).
        case watch(generation: Int, WatchUpdate)
        /// FleetState changed.
        case connection(Fleet.State, now: UInt64)
        case tick(UInt64)
    }

    private enum Phase: Sendable, Equatable {
        case queued
        /// Asked to prepare; not yet sent.
        case preparing
        /// Prepared: waits for the writes being prepared with it, to go in one txn.
        case ready
        /// Its txn is with etcd.
        case sent
        /// Paused before another attempt (its keys stay reserved, so this host's order holds).
        case paused
    }

    private struct Write: Sendable {
        var footprint: Footprint
        var compareAndSet: Bool
        var attempt = 1
        /// Until when it may wait for FleetState `connected` (uptime nanoseconds), nil if not waiting.
        var deadline: UInt64?
        var phase: Phase = .queued
        var size = Size()
        /// Its last txn held other writes and failed: the next goes alone, so a failed compare is its own.
        var split = false
        var cursorAtSend: Int64 = 0
        var clusterID: UInt64?
        var terms: [UInt64: UInt64] = [:]
    }

    /// FleetState as the shell last said.
    private(set) var state: Fleet.State
    /// How long a write may wait for `connected` (nanoseconds): the request timeout.
    let connectionWait: UInt64
    /// How many txns may be with etcd at once (``maximumInFlight``; tests take more).
    let txnsOut: Int
    private var writes: [WriteID: Write] = [:]
    /// Writes waiting for their turn, in arrival order (retries and answers to etcd going back first).
    private var queue: [WriteID] = []
    /// The txns with etcd, by their first write: the writes each holds, in order.
    private var txns: [WriteID: [WriteID]] = [:]
    /// Writes prepared in this turn, in order, to be sent together once none is being prepared.
    private var ready: [WriteID] = []
    /// Watch updates held back (see the type's documentation), in order.
    private(set) var held: [(generation: Int, update: WatchUpdate)] = []
    /// The layout, to tell which fleet key an etcd key is.
    let layout: FleetLayout
    /// A source of the retries' random pauses (injected: tests want them fixed).
    private var random: @Sendable (Int) -> Int

    init(state: Fleet.State = .connecting, connectionWait: UInt64, layout: FleetLayout, txnsOut: Int = Self.maximumInFlight,
         random: @escaping @Sendable (Int) -> Int = { Int.random(in: 0...$0) }) {
        self.state = state
        self.connectionWait = connectionWait
        self.txnsOut = txnsOut
        self.layout = layout
        self.random = random
    }

    /// How many txns are with etcd.
    var inFlightCount: Int { txns.count }
    /// How many writes wait for their turn.
    var queuedCount: Int { queue.count }
    /// Whether `id` is known (queued, with etcd, or paused).
    func knows(_ id: WriteID) -> Bool { writes[id] != nil }

    mutating func handle(_ event: Event) -> [Action] {
        var actions: [Action] = []
        switch event {
        case .write(let id, let footprint, let compareAndSet, let now):
            var write = Write(footprint: footprint, compareAndSet: compareAndSet)
            if state != .connected { write.deadline = now + connectionWait }
            writes[id] = write
            queue.append(id)
            if let deadline = write.deadline { actions.append(.wake(at: deadline)) }
        case .prepared(let id, let footprint, let size, let cursor, let clusterID, let terms):
            guard var write = writes[id], write.phase == .preparing else { break }
            write.footprint = footprint
            write.size = size
            write.cursorAtSend = cursor
            write.clusterID = clusterID
            write.terms = terms
            if state != .connected || others(of: id).contains(where: { footprint.depends(on: $0.footprint) && $0.phase != .queued }) {
                // Its keys changed at its turn and now meet a write in flight (or the
                // connection went): back to the head of the line.
                write.phase = .queued
                writes[id] = write
                queue.insert(id, at: 0)
                break
            }
            write.phase = .ready
            writes[id] = write
            ready.append(id)
        case .settledLocally(let id):
            writes[id] = nil
            actions += releaseHeld()
        case .txnAnswered(let id, let outcome):
            guard let members = txns.removeValue(forKey: id) else { break }
            actions += answered(members, outcome)
        case .applied(let id, let outcome):
            guard var write = writes.removeValue(forKey: id) else { break }
            switch outcome {
            case .committed: actions.append(.reply(id))
            case .commitFailed: actions.append(.fail(id, .commitFailed))
            case .again:
                if write.attempt < Self.maximumAttempts {
                    write.attempt += 1
                    write.phase = .queued
                    writes[id] = write
                    queue.insert(id, at: 0)
                } else {
                    actions.append(.fail(id, .attemptsExhausted))
                }
            }
            actions += releaseHeld()
        case .retryDue(let id, let now):
            guard var write = writes[id], write.phase == .paused else { break }
            write.phase = .queued
            if state != .connected {
                write.deadline = min(write.deadline ?? .max, now + connectionWait)
                actions.append(.wake(at: write.deadline!))
            }
            writes[id] = write
            queue.insert(id, at: 0)
        case .watch(let generation, let update):
            if holdsBack(update) {
                held.append((generation, update))
            } else {
                actions.append(.applyUpdate(generation: generation, update))
            }
        case .connection(let next, let now):
            // `connecting` again: the machine went there itself at a rewind; the deadlines start now.
            guard next != state || next == .connecting else { break }
            state = next
            switch next {
            case .unavailable:
                for id in queue { writes[id] = nil; actions.append(.fail(id, .becameUnavailable)) }
                queue = []
            case .connecting:
                let deadline = now + connectionWait
                for id in queue where (writes[id]?.deadline ?? .max) > deadline { writes[id]?.deadline = deadline }
                if !queue.isEmpty { actions.append(.wake(at: deadline)) }
            case .connected, .off:
                break
            }
        case .tick(let now):
            guard state != .connected else { break }
            let expired = queue.filter { (writes[$0]?.deadline ?? .max) <= now }
            queue.removeAll { expired.contains($0) }
            for id in expired { writes[id] = nil; actions.append(.fail(id, .connectionWaitOver(state))) }
        }
        actions += sendReady()
        return actions + startWrites()
    }

    private func others(of id: WriteID) -> [Write] {
        writes.compactMap { $0.key == id ? nil : $0.value }
    }

    /// Moves every write whose turn it is to `preparing`: connected, a txn free, and
    /// independent of every write in flight, paused or queued before it. They are prepared in
    /// this turn, and sent together (``sendReady()``).
    private mutating func startWrites() -> [Action] {
        guard state == .connected, ready.isEmpty, !writes.values.contains(where: { $0.phase == .preparing }) else { return [] }
        let free = txnsOut - txns.count
        guard free > 0 else { return [] }
        var actions: [Action] = []
        // Not more than the free txns can hold: one left over is prepared again at its turn.
        var budget = free * FleetLayout.maximumOperations
        var ahead: [Footprint] = writes.values.filter { $0.phase != .queued }.map(\.footprint)
        var index = 0
        while index < queue.count, budget > 0 {
            let id = queue[index]
            guard var write = writes[id] else { queue.remove(at: index); continue }
            if ahead.contains(where: write.footprint.depends(on:)) {
                // It waits, and so does everything that depends on it.
                ahead.append(write.footprint)
                index += 1
                continue
            }
            // At least a compare per key (what it took last time, if it ran): the rest is sendReady's to bound.
            let estimate = max(write.size.compares, write.footprint.written.count + write.footprint.read.count, 1)
            if estimate > budget, !actions.isEmpty { break }
            budget -= estimate
            queue.remove(at: index)
            write.phase = .preparing
            writes[id] = write
            ahead.append(write.footprint)
            actions.append(.prepare(id, attempt: write.attempt, deadline: write.deadline))
        }
        return actions
    }

    /// Once no write is being prepared, sends the ready ones: as few txns as etcd's bounds
    /// allow, in order, each write that must go alone in its own; those no free txn can take
    /// wait at the head of the line.
    private mutating func sendReady() -> [Action] {
        guard !ready.isEmpty, !writes.values.contains(where: { $0.phase == .preparing }) else { return [] }
        let prepared = ready.filter { writes[$0]?.phase == .ready }
        ready = []
        var actions: [Action] = []
        var txn: [WriteID] = [], total = Size(), leftOver: [WriteID] = []
        for id in prepared {
            guard let write = writes[id] else { continue }
            let alone = write.size.alone || write.split || write.attempt > 1
            let fits = !alone && !total.alone
                && total.compares + write.size.compares <= FleetLayout.maximumOperations
                && total.operations + write.size.operations <= FleetLayout.maximumOperations
                && total.bytes + write.size.bytes <= FleetLayout.maximumRequestBytes
            if !fits, !txn.isEmpty {
                actions.append(send(txn))
                txn = []
                total = Size()
            }
            guard state == .connected, !txn.isEmpty || txns.count < txnsOut else {
                leftOver.append(id)
                continue
            }
            txn.append(id)
            // A write that lost a race before is likely to lose again: alone, it costs no other a resend.
            total = Size(compares: total.compares + write.size.compares, operations: total.operations + write.size.operations,
                         bytes: total.bytes + write.size.bytes, alone: alone)
        }
        if !txn.isEmpty { actions.append(send(txn)) }
        requeue(leftOver, split: false)
        return actions
    }

    /// Marks the writes of one txn sent.
    private mutating func send(_ ids: [WriteID]) -> Action {
        let members = ids.compactMap { writes[$0] }
        // The port may send it again when its member dies under it only if it cannot be applied
        // twice: every write compares every value it replaces. Not a CompareAndSet: were the
        // first one applied, the second's failed compare would answer Conflict for the caller's
        // own write.
        let resendable = members.allSatisfy { !$0.compareAndSet && $0.attempt <= Self.attemptsComparingValues }
        let deadline = members.compactMap(\.deadline).min()
        for id in ids {
            writes[id]?.phase = .sent
            writes[id]?.split = false
            // Its wait is over: a retry after a conflict gets the whole request timeout, as any write.
            writes[id]?.deadline = nil
        }
        txns[ids[0]] = ids
        return .send(ids, resendable: resendable, deadline: deadline)
    }

    /// A txn's outcome, for the writes it held.
    private mutating func answered(_ ids: [WriteID], _ outcome: TxnOutcome) -> [Action] {
        let sent = ids.filter { writes[$0]?.phase == .sent }
        guard let first = sent.first.flatMap({ writes[$0] }) else { return releaseHeld() }
        let response: TxnResponse
        switch outcome {
        case .failed(let error):
            let unreachable = error.code == .unavailable || error.code == .timedOut
            // Refused, and etcd does not say for whose part: each goes again alone.
            if !unreachable, sent.count > 1 {
                requeue(sent, split: true)
                return releaseHeld()
            }
            for id in sent { writes[id] = nil }
            var actions: [Action] = sent.map { .fail($0, .txn(error.code, error.message)) }
            if unreachable {
                // The writes queued behind would each wait as long again: they get the same answer now.
                for other in queue { writes[other] = nil; actions.append(.fail(other, .earlierWriteFailed(error.message))) }
                queue = []
                actions.append(.markUnreachable)
            }
            return actions + releaseHeld()
        case .answered(let answer):
            response = answer
        }
        let cursor = sent.compactMap { writes[$0]?.cursorAtSend }.max() ?? first.cursorAtSend
        let rewind = FleetRewind.check(response.header, cursor: cursor, clusterID: first.clusterID, terms: first.terms)
        // etcd went back in time: nothing more is sent until the mirror is etcd's again.
        if rewind != nil { state = .connecting }
        if response.succeeded {
            // Each still reserved (and its echo still held) until the shell reports its commit.
            var actions: [Action] = sent.map { .apply($0, response) }
            if let rewind { actions.append(.readAll(rewind)) }
            return actions
        }
        if rewind != nil || sent.count > 1 {
            // etcd went back in time: the compares failed for that, not because another host
            // wrote, and the writes are sent once the mirror is read again. Or several writes
            // were in the txn and etcd does not say whose compare failed: each goes again alone.
            requeue(sent, split: rewind == nil)
            return (rewind.map { [.readAll($0)] } ?? []) + releaseHeld()
        }
        let id = sent[0], write = first
        var actions: [Action] = [.refresh(id, response)]
        if write.compareAndSet {
            writes[id] = nil
            actions.append(.fail(id, .compareAndSetConflict))
        } else if write.attempt >= Self.maximumAttempts {
            writes[id] = nil
            actions.append(.fail(id, .attemptsExhausted))
        } else {
            var retry = write
            retry.attempt += 1
            retry.phase = .paused
            writes[id] = retry
            // A short random pause: two hosts writing flat out would otherwise retry in lockstep.
            actions.append(.retry(id, microseconds: random(500 * retry.attempt)))
        }
        return actions + releaseHeld()
    }

    /// Puts `ids` back at the head of the line, in order (`split`: each to be sent alone next).
    private mutating func requeue(_ ids: [WriteID], split: Bool) {
        for id in ids { writes[id]?.phase = .queued; if split { writes[id]?.split = true } }
        queue.insert(contentsOf: ids, at: 0)
    }

    /// Whether `update` waits: it touches a fleet key a txn that is out writes, or others wait
    /// already (order is kept).
    private func holdsBack(_ update: WatchUpdate) -> Bool {
        if !held.isEmpty { return true }
        return touchesSent(update)
    }

    private func touchesSent(_ update: WatchUpdate) -> Bool {
        guard case .events(let events, _) = update else { return false }
        let sent = writes.values.filter { $0.phase == .sent }
        guard !sent.isEmpty else { return false }
        return events.contains { event in
            switch layout.classify(event.kv.key) {
            case .definition(let key), .value(let key): sent.contains { $0.footprint.written.contains(key) }
            case .host, .other: false
            }
        }
    }

    /// The held updates whose keys no txn out writes any more, from the head, in order.
    private mutating func releaseHeld() -> [Action] {
        var actions: [Action] = []
        while let first = held.first, !touchesSent(first.update) {
            held.removeFirst()
            actions.append(.applyUpdate(generation: first.generation, first.update))
        }
        return actions
    }

    /// Forgets the held updates (the watch was replaced; theirs are stale).
    mutating func dropHeld() { held = [] }
}
