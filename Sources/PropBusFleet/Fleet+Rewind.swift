import DBus
import Dispatch
import Etcd
import Glibc
import PropBus
import PropBusService
import Synchronization
import SystemKit

extension Fleet {
    // MARK: etcd going back in time

    /// Asks etcd with a linearizable read whether it went back in time (``FleetRewind``) after
    /// a watch reported a revision below the cursor; if not, and `connecting`, the watch's
    /// connection stands.
    func confirmRevision(connecting: Bool) {
        let generation = watchGeneration, since = rewindFloor, terms = raftTerms
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
            highestRevision = max(highestRevision, header.revision)
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
        highestRevision = 0
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
    /// the prefix) restarts it once per cursor, not forever. Counts that still differ after
    /// that, with nothing later to explain them, are a mirror holding what etcd lost
    /// (``FleetRewind/mirrorDisagrees``): read in full, once per cursor too.
    func checkWatch() {
        guard watch != nil, !stopped else { return }
        let since = cursor, floor = rewindFloor, terms = raftTerms, client = client, layout = layout
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
            fleet.async { $0.watchChecked(since: since, floor: floor, terms: terms, counts: counts, header: header, pending: pending) }
        }
    }

    /// The second half of ``checkWatch()``, on the queue: etcd's counts and whether it holds
    /// changes after `since`; `floor`: ``rewindFloor`` when they were asked.
    private func watchChecked(since: Int64, floor: Int64, terms: [UInt64: UInt64], counts: (Int64, Int64), header: ResponseHeader,
                              pending: Bool?) {
        guard !stopped, watch != nil, !noticeRewind(header, since: floor, terms: terms), let pending else { return }
        let mirrored = (revisions.values.filter { $0.definition > 0 }.count, revisions.values.filter { $0.value > 0 }.count)
        let countsDiffer = counts.0 != Int64(mirrored.0) || counts.1 != Int64(mirrored.1)
        let restarted = restartedAtCursor == since
        guard pending || (countsDiffer && readAgainAtCursor != since), cursor == since else {
            suspectedCursor = nil
            return
        }
        guard suspectedCursor == since else {
            suspectedCursor = since
            return
        }
        suspectedCursor = nil
        if !pending, let rewind = FleetRewind.check(counts: counts, mirrored: mirrored, at: since, watchRestartedAtCursor: restarted,
                                                    readAgainAtCursor: readAgainAtCursor == since) {
            readAgainAtCursor = since
            rewound(rewind)
            return
        }
        guard pending || !restarted else { return }
        restartedAtCursor = since
        Service.log("fleet: the watch delivered nothing after etcd revision \(since) while etcd holds \(pending ? "later changes" : "\(counts.0) definitions and \(counts.1) values against the mirror's \(mirrored.0) and \(mirrored.1)"); watching again on another member")
        setState(.unavailable)
        startWatch(from: since + 1)
    }

    /// The fleet a mirror belongs to: the prefix and the etcd cluster's id. Cursors and
    /// revisions count in one cluster, and a mirror holds one prefix's keys.
    func sourceName(_ header: ResponseHeader) -> String {
        "\(configuration.prefix)@\(String(header.clusterID, radix: 16))"
    }
}
