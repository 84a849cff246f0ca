import Etcd
import PropBus
@testable import PropBusFleet
@testable import PropBusService
import XCTest

/// One host's ``FleetMachine`` driven by hand against a fake etcd (``FakeEtcd/execute(_:_:_:)``,
/// synchronous), with a mirror kept as the real shell keeps it: a write's answer overwrites its
/// keys whatever their revision (the call's result), a watch event applies when it is newer.
/// Every interleaving of etcd's order, answers and watch deliveries is the test's to choose.
private final class Harness {
    var machine: FleetMachine
    var etcd = FakeEtcd.State()
    let layout = FleetLayout(prefix: "/t/")
    var mirror: [Key: (value: String, revision: Int64)] = [:]
    var cursor: Int64 = 0
    /// The highest raft term each etcd member answered with, as the shell records it.
    var terms: [UInt64: UInt64] = [:]
    private var intents: [UInt64: (values: [Key: String], compareAndSet: Int64?, read: Set<Key>)] = [:]
    /// Txns sent and not yet run, by their first write.
    private var outbox: [UInt64: (compares: [Compare], success: [RequestOp], failure: [RequestOp])] = [:]
    /// The txn (its first write) each write was last sent in.
    private var txnOf: [UInt64: UInt64] = [:]
    private var answers: [UInt64: TxnResponse] = [:]
    private var backlog: [WatchUpdate] = []
    /// What the machine asked for, readably: "prepare 1", "send 1", "apply 1", "reply 1",
    /// "fail 1 …", "update k=v@r", "retry 1", "unreachable", "readAll".
    var log: [String] = []
    /// The writes of each txn sent, in order.
    var sends: [[UInt64]] = []
    var failNextCommit = false
    /// What each readAll said etcd did.
    var rewinds: [FleetRewind] = []
    var now: UInt64 = 1_000_000_000

    /// `txnsOut`: more txns with etcd at once than the daemon has, for interleavings of several answers.
    init(state: Fleet.State = .connected, txnsOut: Int = FleetMachine.maximumInFlight) {
        machine = FleetMachine(state: state, connectionWait: 3_000_000_000, layout: layout, txnsOut: txnsOut, random: { _ in 0 })
    }

    static func key(_ text: String) -> Key { try! Key(text) }

    func write(_ id: UInt64, _ values: [String: String], compareAndSet: Int64? = nil, reading: [String] = []) {
        let values = Dictionary(uniqueKeysWithValues: values.map { (Self.key($0.key), $0.value) })
        let read = Set(reading.map(Self.key))
        intents[id] = (values, compareAndSet, read)
        feed(.write(id, .init(written: Set(values.keys), read: read), compareAndSet: compareAndSet != nil, now: now))
    }

    /// etcd runs write `id`'s txn now (its answer is not delivered yet); the watch's update is queued.
    func etcdRuns(_ id: UInt64) {
        let id = txnOf[id] ?? id
        guard let txn = outbox.removeValue(forKey: id) else { return XCTFail("write \(id) was not sent") }
        let (response, events) = FakeEtcd.execute(&etcd, txn.compares, txn.success, txn.failure)
        answers[id] = response
        if !events.isEmpty { backlog.append(.events(events, revision: response.header.revision)) }
    }

    func answer(_ id: UInt64) {
        let id = txnOf[id] ?? id
        guard let response = answers.removeValue(forKey: id) else { return XCTFail("etcd did not run write \(id)") }
        feed(.txnAnswered(id, .answered(response)))
        terms[response.header.memberID] = max(terms[response.header.memberID] ?? 0, response.header.raftTerm)
    }

    /// The connection went away before the answer (the member died): the port's error.
    func lose(_ id: UInt64, _ code: EtcdError.Code) {
        let id = txnOf[id] ?? id
        outbox[id] = nil
        answers[id] = nil
        feed(.txnAnswered(id, .failed(EtcdError(code, "etcd at http://127.0.0.1:1 took /v3/kv/txn but gave no answer"))))
    }

    /// Another host writes `key` straight to etcd.
    func otherHostWrites(_ key: String, _ value: String) {
        let (response, events) = FakeEtcd.execute(&etcd, [], [.put(layout.valueKey(Self.key(key)), Array(value.utf8))], [])
        backlog.append(.events(events, revision: response.header.revision))
    }

    /// The watch delivers everything etcd did so far, in order.
    func deliverWatch() {
        let updates = backlog
        backlog = []
        for update in updates { feed(.watch(generation: 1, update)) }
    }

    func etcdValue(_ key: String) -> String? {
        etcd.kvs[layout.valueKey(Self.key(key))].map { String(decoding: $0.value, as: UTF8.self) }
    }

    func mirrorValue(_ key: String) -> String? { mirror[Self.key(key)]?.value }

    func sent(_ id: UInt64) -> Bool { outbox[txnOf[id] ?? id] != nil }

    func feed(_ event: FleetMachine.Event) {
        for action in machine.handle(event) { perform(action) }
    }

    private func perform(_ action: FleetMachine.Action) {
        switch action {
        case .prepare(let id, _, _):
            log.append("prepare \(id)")
            guard let intent = intents[id] else { return }
            let size = FleetMachine.Size(compares: intent.values.count + intent.read.count, operations: intent.values.count)
            feed(.prepared(id, .init(written: Set(intent.values.keys), read: intent.read), size: size, cursor: cursor,
                           clusterID: etcd.clusterID, terms: terms))
        case .send(let ids, _, _):
            log.append("send " + ids.map(String.init).joined(separator: "+"))
            sends.append(ids)
            var compares: [Compare] = [], success: [RequestOp] = [], failure: [RequestOp] = []
            for id in ids {
                txnOf[id] = ids[0]
                guard let intent = intents[id] else { continue }
                for (key, value) in intent.values.sorted(by: { $0.key < $1.key }) {
                let etcdKey = layout.valueKey(key)
                    compares.append(.modRevision(of: etcdKey, is: intent.compareAndSet ?? mirror[key]?.revision ?? 0))
                    success.append(.put(etcdKey, Array(value.utf8)))
                    failure.append(.get(etcdKey))
                }
                for key in intent.read.sorted() {
                    compares.append(.modRevision(of: layout.valueKey(key), is: mirror[key]?.revision ?? 0))
                    failure.append(.get(layout.valueKey(key)))
                }
            }
            outbox[ids[0]] = (compares, success, failure)
        case .apply(let id, let response):
            log.append("apply \(id)")
            if failNextCommit {
                failNextCommit = false
                feed(.applied(id, .commitFailed))
                return
            }
            for (key, value) in intents[id]?.values ?? [:] { mirror[key] = (value, response.header.revision) }
            feed(.applied(id, .committed))
        case .refresh(let id, let response):
            log.append("refresh \(id)")
            for case .range(let range) in response.responses {
                for kv in range.kvs { if case .value(let key) = layout.classify(kv.key) { mirror[key] = (String(decoding: kv.value, as: UTF8.self), kv.modRevision) } }
            }
        case .retry(let id, _):
            log.append("retry \(id)")
        case .reply(let id):
            log.append("reply \(id)")
        case .fail(let id, let failure):
            log.append("fail \(id) \(failure)")
        case .applyUpdate(_, let update):
            guard case .events(let events, let revision) = update else { return }
            for event in events {
                guard case .value(let key) = layout.classify(event.kv.key) else { continue }
                let value = String(decoding: event.kv.value, as: UTF8.self)
                log.append("update \(key.text)=\(value)@\(event.kv.modRevision)")
                if event.kv.modRevision > mirror[key]?.revision ?? 0 { mirror[key] = (value, event.kv.modRevision) }
            }
            cursor = max(cursor, revision)
        case .wake:
            log.append("wake")
        case .markUnreachable:
            log.append("unreachable")
        case .readAll(let rewind):
            log.append("readAll")
            rewinds.append(rewind)
        }
    }

    func index(of entry: String) -> Int? { log.firstIndex(of: entry) }
}

/// The fleet's write path as a state machine, without etcd, a bus or a clock:
/// the races past reviews found, each as an interleaving.
final class FleetMachineTests: XCTestCase {
    // MARK: Writes in flight together

    func testIndependentWritesAreWithEtcdTogetherUpToTheBound() {
        let host = Harness()
        for id in UInt64(1)...10 { host.write(id, ["a.k\(id)": "v"]) }
        let sent = (UInt64(1)...10).filter(host.sent)
        XCTAssertEqual(sent, Array(1...UInt64(FleetMachine.maximumInFlight)), "independent writes go together, at most the bound")
        host.etcdRuns(1)
        host.answer(1)
        XCTAssertTrue(host.sent(9), "an answer makes room for the next write")
    }

    func testAWriteOfAKeyWithEtcdWaitsForThatAnswerSoTheHostsOrderHolds() {
        let host = Harness()
        host.write(1, ["a.k": "first"])
        host.write(2, ["a.k": "second"])
        XCTAssertTrue(host.sent(1))
        XCTAssertFalse(host.sent(2), "a write of a key with etcd waits")
        host.etcdRuns(1)
        host.answer(1)
        XCTAssertTrue(host.sent(2), "computed again and sent once the first answer is applied")
        host.etcdRuns(2)
        host.answer(2)
        XCTAssertEqual(host.etcdValue("a.k"), "second")
        XCTAssertEqual(host.mirrorValue("a.k"), "second")
        XCTAssertEqual(host.log.filter { $0.hasPrefix("reply") }, ["reply 1", "reply 2"])
        XCTAssertFalse(host.log.contains { $0.hasPrefix("retry") || $0.hasPrefix("fail") }, "no conflict with itself: \(host.log)")
    }

    func testAWriteThatReadsAKeyWithEtcdWaitsToo() {
        let host = Harness()
        host.write(1, ["a.source": "5"])
        host.write(2, ["a.copy": "x"], reading: ["a.source"])
        XCTAssertFalse(host.sent(2), "its compare would fail on the first write's revision")
        host.etcdRuns(1)
        host.answer(1)
        XCTAssertTrue(host.sent(2))
    }

    func testAQueuedWriteDependingOnAnEarlierQueuedOneDoesNotOvertakeIt() {
        let host = Harness()
        host.write(1, ["a.k": "1"])
        host.write(2, ["a.k": "2", "a.m": "2"])
        host.write(3, ["a.m": "3"])
        XCTAssertFalse(host.sent(3), "write 3 touches a key of write 2, which waits: 3 waits behind it")
        host.etcdRuns(1); host.answer(1)
        XCTAssertTrue(host.sent(2))
        XCTAssertFalse(host.sent(3))
        host.etcdRuns(2); host.answer(2)
        host.etcdRuns(3); host.answer(3)
        XCTAssertEqual(host.etcdValue("a.m"), "3")
    }

    // MARK: Independent writes in one txn

    /// Writes 101… fill every txn the machine lets be with etcd at once: what comes next waits.
    private func fillTheLanes(_ host: Harness) -> [UInt64] {
        let fillers = (0..<UInt64(FleetMachine.maximumInFlight)).map { 101 + $0 }
        for id in fillers { host.write(id, ["z.fill\(id)": "f"]) }
        XCTAssertTrue(fillers.allSatisfy(host.sent), "\(host.log)")
        return fillers
    }

    func testIndependentWritesReadyTogetherGoToEtcdAsOneTxn() {
        let host = Harness()
        let fillers = fillTheLanes(host)
        host.write(1, ["a.k": "one"])
        host.write(2, ["b.k": "two"])
        XCTAssertFalse(host.sent(1) || host.sent(2), "no txn free")
        host.etcdRuns(fillers[0])
        host.answer(fillers[0])
        XCTAssertTrue(host.log.contains("send 1+2"), "one txn for both: \(host.log)")
        host.etcdRuns(1)
        // The watch's echo (both keys at the txn's revision) comes before the answer: held.
        host.deliverWatch()
        XCTAssertFalse(host.log.contains { $0.hasPrefix("update a.k") || $0.hasPrefix("update b.k") }, "\(host.log)")
        host.answer(2)
        XCTAssertEqual(host.log.filter { $0 == "apply 1" || $0 == "apply 2" || $0 == "reply 1" || $0 == "reply 2" },
                       ["apply 1", "reply 1", "apply 2", "reply 2"], "each write applied and answered: \(host.log)")
        XCTAssertEqual(host.etcdValue("a.k"), "one")
        XCTAssertEqual(host.etcdValue("b.k"), "two")
        XCTAssertEqual(host.mirrorValue("a.k"), "one")
        XCTAssertEqual(host.mirrorValue("b.k"), "two")
        XCTAssertEqual(host.mirror[Harness.key("a.k")]?.revision, host.mirror[Harness.key("b.k")]?.revision, "one etcd revision")
        XCTAssertEqual(host.machine.held.count, 0)
    }

    func testACombinedTxnThatFailedIsSplitAndOnlyTheConflictingWriteIsAConflict() {
        let host = Harness()
        host.otherHostWrites("a.k", "theirs")
        host.deliverWatch()
        let fillers = fillTheLanes(host)
        host.write(1, ["a.k": "mine"], compareAndSet: 0)
        host.write(2, ["b.k": "innocent"])
        host.etcdRuns(fillers[0])
        host.answer(fillers[0])
        XCTAssertTrue(host.log.contains("send 1+2"), "\(host.log)")
        host.etcdRuns(1)
        host.answer(1)
        XCTAssertFalse(host.log.contains { $0.hasPrefix("fail 2") || $0.hasPrefix("retry 2") }, "\(host.log)")
        XCTAssertFalse(host.log.contains { $0.hasPrefix("fail 1") || $0.hasPrefix("refresh") }, "etcd does not say whose compare failed: \(host.log)")
        // Each on its own now, as txns free up.
        for filler in fillers.dropFirst() { host.etcdRuns(filler); host.answer(filler) }
        host.etcdRuns(1)
        host.answer(1)
        host.etcdRuns(2)
        host.answer(2)
        XCTAssertEqual(host.sends.filter { !$0.contains(where: fillers.contains) }, [[1, 2], [1], [2]], "\(host.log)")
        XCTAssertTrue(host.log.contains("fail 1 compareAndSetConflict"), "\(host.log)")
        XCTAssertTrue(host.log.contains("reply 2"), "\(host.log)")
        XCTAssertEqual(host.etcdValue("a.k"), "theirs")
        XCTAssertEqual(host.etcdValue("b.k"), "innocent")
    }

    func testACombinedTxnStopsAtEtcdsOperationBound() {
        let host = Harness()
        let fillers = fillTheLanes(host)
        // 50 keys each: 50 compares and 50 puts; two fit in 128 operations, three do not.
        func keys(_ group: String) -> [String: String] {
            Dictionary(uniqueKeysWithValues: (1...50).map { ("\(group).k\($0)", "v") })
        }
        host.write(1, keys("a"))
        host.write(2, keys("b"))
        host.write(3, keys("c"))
        host.etcdRuns(fillers[0])
        host.answer(fillers[0])
        XCTAssertEqual(host.sends.filter { !$0.contains(where: fillers.contains) }, [[1, 2]], "\(host.log)")
        host.etcdRuns(1)
        host.answer(1)
        XCTAssertTrue(host.sent(3), "the one that did not fit goes next: \(host.log)")
        host.etcdRuns(3)
        host.answer(3)
        XCTAssertEqual(host.sends.filter { !$0.contains(where: fillers.contains) }, [[1, 2], [3]], "\(host.log)")
        XCTAssertTrue(["reply 1", "reply 2", "reply 3"].allSatisfy(host.log.contains), "\(host.log)")
        XCTAssertEqual(host.etcdValue("c.k50"), "v")
    }

    func testARefusedTxnOfSeveralWritesIsSplitAndARefusalFailsOnlyItsOwnWrite() {
        let host = Harness()
        let fillers = fillTheLanes(host)
        host.write(1, ["a.k": "one"])
        host.write(2, ["b.k": "two"])
        host.etcdRuns(fillers[0])
        host.answer(fillers[0])
        XCTAssertTrue(host.log.contains("send 1+2"), "\(host.log)")
        // Refused (not unreachable): etcd does not say for whose part.
        host.lose(1, .server)
        XCTAssertFalse(host.log.contains { $0.hasPrefix("fail") }, "\(host.log)")
        for filler in fillers.dropFirst() { host.etcdRuns(filler); host.answer(filler) }
        XCTAssertTrue(host.sent(1), "\(host.log)")
        host.write(3, ["c.k": "three"])
        host.lose(1, .server)
        XCTAssertTrue(host.log.contains { $0.hasPrefix("fail 1 txn") }, "\(host.log)")
        XCTAssertFalse(host.log.contains { $0.hasPrefix("fail 2") || $0.hasPrefix("fail 3") }, "a refusal is its own write's: \(host.log)")
        host.etcdRuns(2)
        host.answer(2)
        host.etcdRuns(3)
        host.answer(3)
        XCTAssertTrue(host.log.contains("reply 2") && host.log.contains("reply 3"), "\(host.log)")
    }

    func testAWriteDependingOnOneInACombinedTxnWaitsForItsAnswer() {
        let host = Harness()
        let fillers = fillTheLanes(host)
        host.write(1, ["a.k": "first"])
        host.write(2, ["b.k": "other"])
        host.write(3, ["a.k": "second"])
        host.etcdRuns(fillers[0])
        host.answer(fillers[0])
        XCTAssertTrue(host.log.contains("send 1+2"), "\(host.log)")
        XCTAssertFalse(host.sent(3), "it writes a key of the combined txn: \(host.log)")
        for filler in fillers.dropFirst() { host.etcdRuns(filler); host.answer(filler) }
        XCTAssertFalse(host.sent(3), "a free txn is not enough: \(host.log)")
        host.etcdRuns(1)
        host.answer(1)
        XCTAssertTrue(host.sent(3), "\(host.log)")
        host.etcdRuns(3)
        host.answer(3)
        XCTAssertEqual(host.etcdValue("a.k"), "second")
        XCTAssertFalse(host.log.contains { $0.hasPrefix("retry") || $0.hasPrefix("fail") }, "\(host.log)")
    }

    // MARK: Held watch updates

    func testOwnWriteEchoedBeforeItsAnswerIsHeldUntilTheAnswerIsApplied() {
        let host = Harness()
        host.write(1, ["a.k": "mine"])
        host.etcdRuns(1)
        // Another host writes the key right after: etcd's last word.
        host.otherHostWrites("a.k", "theirs")
        host.deliverWatch()
        XCTAssertFalse(host.log.contains { $0.hasPrefix("update") }, "held while the write is out: \(host.log)")
        host.answer(1)
        let applied = host.index(of: "apply 1"), echoed = host.index(of: "update a.k=mine@2")
        XCTAssertNotNil(applied)
        XCTAssertNotNil(echoed)
        XCTAssertLessThan(applied ?? .max, echoed ?? -1, "the answer first, then what the watch brought: \(host.log)")
        XCTAssertEqual(host.mirrorValue("a.k"), "theirs", "the later change wins, as in etcd")
        XCTAssertEqual(host.etcdValue("a.k"), "theirs")
    }

    func testAnUpdateBehindAHeldOneIsHeldTooSoOrderIsKept() {
        let host = Harness()
        host.write(1, ["a.k": "mine"])
        host.etcdRuns(1)
        host.otherHostWrites("b.other", "1")
        host.deliverWatch()
        XCTAssertEqual(host.machine.held.count, 2, "the second touches no key of the write, but comes after one that waits")
        host.answer(1)
        XCTAssertEqual(host.log.filter { $0.hasPrefix("update") }, ["update a.k=mine@2", "update b.other=1@3"])
        XCTAssertEqual(host.machine.held.count, 0)
    }

    func testAnUpdateOfOtherKeysIsAppliedAtOnceWhileAWriteIsOut() {
        let host = Harness()
        host.write(1, ["a.k": "mine"])
        host.otherHostWrites("b.other", "1")
        host.deliverWatch()
        XCTAssertEqual(host.mirrorValue("b.other"), "1")
    }

    // MARK: Answers

    func testAFailedCommitAfterASuccessfulTxnFailsTheCallAndTheWatchBringsTheValueBack() {
        let host = Harness()
        host.write(1, ["a.k": "mine"])
        host.etcdRuns(1)
        host.deliverWatch()
        host.failNextCommit = true
        host.answer(1)
        XCTAssertTrue(host.log.contains("fail 1 commitFailed"), "\(host.log)")
        XCTAssertFalse(host.log.contains("reply 1"), "a reply only after the commit")
        XCTAssertEqual(host.mirrorValue("a.k"), "mine", "the held echo, applied once the write is settled, brings etcd's value")
    }

    func testAWriteWhoseMemberDiedFailsWithTheWritesQueuedBehindAndLeavesOthersInFlight() {
        let host = Harness(txnsOut: 2)
        host.write(1, ["a.k": "1"])
        host.write(2, ["b.k": "2"])
        host.write(3, ["a.k": "3"])
        host.lose(1, .unavailable)
        XCTAssertTrue(host.log.contains { $0.hasPrefix("fail 1 txn") })
        XCTAssertTrue(host.log.contains { $0.hasPrefix("fail 3 earlierWriteFailed") }, "it would wait as long again: \(host.log)")
        XCTAssertTrue(host.log.contains("unreachable"))
        XCTAssertFalse(host.log.contains { $0.hasPrefix("fail 2") }, "its own answer decides")
        host.etcdRuns(2)
        host.answer(2)
        XCTAssertTrue(host.log.contains("reply 2"))
    }

    func testAWriteWithoutAnswerThatLandedIsBroughtByTheWatch() {
        let host = Harness()
        host.write(1, ["a.k": "landed"])
        host.etcdRuns(1)
        host.deliverWatch()
        host.lose(1, .timedOut)
        XCTAssertEqual(host.mirrorValue("a.k"), "landed", "the echo held for it is applied once its fate is settled")
        XCTAssertEqual(host.machine.held.count, 0)
    }

    func testALostRaceIsRefreshedAndRetriedKeepingTheKeyForItsWriter() {
        let host = Harness()
        host.write(1, ["a.k": "mine"])
        host.otherHostWrites("a.k", "theirs")
        host.etcdRuns(1)
        host.answer(1)
        XCTAssertEqual(host.log.suffix(2), ["refresh 1", "retry 1"])
        XCTAssertEqual(host.mirrorValue("a.k"), "theirs")
        host.write(2, ["a.k": "later"])
        XCTAssertFalse(host.sent(2), "the key stays its retrying writer's")
        host.feed(.retryDue(1, now: host.now))
        XCTAssertTrue(host.sent(1))
        host.etcdRuns(1)
        host.answer(1)
        XCTAssertTrue(host.sent(2))
        host.etcdRuns(2)
        host.answer(2)
        XCTAssertEqual(host.etcdValue("a.k"), "later", "this host's order: mine, then later")
    }

    func testACompareAndSetThatLostIsAConflict() {
        let host = Harness()
        host.otherHostWrites("a.k", "theirs")
        host.write(1, ["a.k": "mine"], compareAndSet: 0)
        host.etcdRuns(1)
        host.answer(1)
        XCTAssertTrue(host.log.contains("fail 1 compareAndSetConflict"), "\(host.log)")
        XCTAssertFalse(host.log.contains("retry 1"))
    }

    func testAPlainWriteGivesUpAfterTheLastAttempt() {
        let host = Harness()
        host.write(1, ["a.k": "mine"])
        for attempt in 1...FleetMachine.maximumAttempts {
            host.otherHostWrites("a.k", "theirs \(attempt)")
            host.etcdRuns(1)
            host.answer(1)
            host.feed(.retryDue(1, now: host.now))
        }
        XCTAssertTrue(host.log.contains("fail 1 attemptsExhausted"), "\(host.log.suffix(3))")
        XCTAssertEqual(host.log.filter { $0 == "retry 1" }.count, FleetMachine.maximumAttempts - 1)
    }

    // MARK: etcd going back in time

    func testAFailedCompareBelowTheMirrorsRevisionIsARewindNotAConflict() {
        let host = Harness()
        host.write(1, ["a.k": "first"])
        host.etcdRuns(1)
        host.answer(1)
        host.deliverWatch()
        host.cursor = 40
        host.mirror[Harness.key("a.k")] = ("first", 40)
        // etcd recreated empty: its revisions start again.
        host.etcd = FakeEtcd.State()
        host.write(2, ["a.k": "second"])
        host.etcdRuns(2)
        host.answer(2)
        XCTAssertTrue(host.log.contains("readAll"), "\(host.log)")
        XCTAssertFalse(host.log.contains { $0 == "retry 2" || $0.hasPrefix("fail 2") }, "not a lost race: \(host.log)")
        // The shell reads etcd in full meanwhile (FleetState connecting), then connects again.
        host.feed(.connection(.connecting, now: host.now))
        host.mirror = [:]
        host.cursor = host.etcd.revision
        XCTAssertFalse(host.sent(2))
        host.feed(.connection(.connected, now: host.now))
        XCTAssertTrue(host.sent(2), "sent again once the mirror is etcd's")
        host.etcdRuns(2)
        host.answer(2)
        XCTAssertTrue(host.log.contains("reply 2"))
        XCTAssertEqual(host.etcdValue("a.k"), "second")
    }

    func testASuccessfulTxnAnsweredBelowTheCursorIsAppliedThenEtcdIsReadAgain() {
        let host = Harness()
        host.cursor = 40
        host.write(1, ["a.k": "v"])
        host.etcdRuns(1)
        host.answer(1)
        let applied = host.index(of: "apply 1"), readAll = host.index(of: "readAll")
        XCTAssertNotNil(readAll, "\(host.log)")
        XCTAssertLessThan(applied ?? .max, readAll ?? -1)
    }

    func testAnAnswerFromAMemberAtALowerRaftTermThanItShowedIsARewindEvenAboveTheCursor() {
        let host = Harness()
        host.etcd.raftTerm = 7
        host.write(1, ["a.k": "first"])
        host.etcdRuns(1)
        host.answer(1)
        host.deliverWatch()
        // Restored from a backup with the cluster's own name, token and URLs, and written past
        // the mirror's revision since: the same cluster and member ids, revisions above the
        // cursor, but the member's raft log started again.
        var restored = FakeEtcd.State()
        restored.revision = host.etcd.revision + 50
        restored.raftTerm = 2
        host.etcd = restored
        host.write(2, ["a.k": "second"])
        host.etcdRuns(2)
        host.answer(2)
        XCTAssertEqual(host.rewinds, [.memberTermBelow(member: 0x1, etcd: 2, seen: 7)], "\(host.log)")
        XCTAssertFalse(host.log.contains { $0 == "retry 2" || $0.hasPrefix("fail 2") }, "not a lost race: \(host.log)")
    }

    func testAnswersOfOneMemberAcrossAnElectionArrivingOutOfOrderAreNoRewind() {
        let host = Harness(txnsOut: 2)
        host.etcd.raftTerm = 7
        host.write(1, ["a.k": "x"])
        host.write(2, ["b.k": "y"])
        host.etcdRuns(1)
        // A new leader between the two: the member answers at a higher term from now on.
        host.etcd.raftTerm = 8
        host.etcdRuns(2)
        host.answer(2)
        host.answer(1)
        XCTAssertEqual(host.rewinds, [], "\(host.log)")
        XCTAssertTrue(host.log.contains("reply 1") && host.log.contains("reply 2"), "\(host.log)")
        // And the next write, sent after the member showed term 8, is judged against 8.
        host.write(3, ["a.k": "z"])
        host.etcd.raftTerm = 8
        host.etcdRuns(3)
        host.answer(3)
        XCTAssertEqual(host.rewinds, [], "\(host.log)")
    }

    // MARK: The connection

    func testAWriteWhileConnectingWaitsForTheConnection() {
        let host = Harness(state: .connecting)
        host.write(1, ["a.k": "v"])
        XCTAssertFalse(host.sent(1))
        XCTAssertEqual(host.log, ["wake"])
        host.feed(.tick(host.now + 1_000_000))
        XCTAssertFalse(host.log.contains { $0.hasPrefix("fail") }, "its wait is not over")
        host.feed(.connection(.connected, now: host.now))
        XCTAssertTrue(host.sent(1))
    }

    func testAWriteWaitingForTheConnectionFailsAtItsDeadline() {
        let host = Harness(state: .connecting)
        host.write(1, ["a.k": "v"])
        host.feed(.tick(host.now + host.machine.connectionWait))
        XCTAssertTrue(host.log.last?.hasPrefix("fail 1 connectionWaitOver") == true, "\(host.log)")
    }

    func testWritesWaitingForTheConnectionFailAtOnceWhenItBecomesUnavailable() {
        let host = Harness(state: .connecting)
        host.write(1, ["a.k": "v"])
        host.feed(.connection(.unavailable, now: host.now))
        XCTAssertEqual(host.log.last, "fail 1 becameUnavailable")
    }
}
