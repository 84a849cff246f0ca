import Etcd

/// etcd gone back in time under a mirror, as an answer's header shows it: restored from a
/// backup (a lower revision, and another cluster id unless the restore kept the cluster's own
/// token), or recreated empty (a revision that starts again at 1).
///
/// Pure, so the decision is tested with plain values; ``Fleet`` acts on it by reading etcd in
/// full, as the source of truth (``Fleet/resynchronize(rewound:)``).
enum FleetRewind: Equatable, Sendable {
    /// An answer at a revision below the last one the mirror applied.
    case revisionBelowMirror(etcd: Int64, mirror: Int64)
    /// Another cluster answers on the fleet's endpoints.
    case otherCluster(etcd: UInt64, mirror: UInt64)
    /// A member answered at a raft term below one it answered with before: its raft log
    /// started again (restored from a backup, or recreated), whatever the revisions say.
    case memberTermBelow(member: UInt64, etcd: UInt64, seen: UInt64)
    /// A watch was cancelled with a compact revision below one etcd reported before.
    case compactionBelowSeen(etcd: Int64, seen: Int64)
    /// etcd's counts of definitions and values at `revision` differ from the mirror's with no
    /// change after it to explain them, still after the watch was started again there.
    case mirrorDisagrees(revision: Int64, definitions: Int64, values: Int64, mirrorDefinitions: Int64, mirrorValues: Int64)

    /// What `header` says against a mirror at `cursor` belonging to cluster `clusterID` (nil
    /// while no answer recorded one). Only answers that reflect every committed change may be
    /// asked: a linearizable read's or a txn's. A watch's header comes from the member that
    /// serves it, which may lag behind: a revision there below the cursor is a reason to ask
    /// with a read, not a verdict (see ``isSuspicious(revision:cursor:)``).
    ///
    /// `terms`: the highest raft term each member answered with *before the request was sent*.
    /// A member's term never goes down in its life, so one answering below it was restored or
    /// recreated, even when etcd has since been written past the cursor (the revision alone then
    /// looks fine). Terms seen only after the request was sent do not count: two answers of one
    /// member on both sides of an election may arrive in either order.
    static func check(_ header: ResponseHeader, cursor: Int64, clusterID: UInt64?, terms: [UInt64: UInt64] = [:]) -> FleetRewind? {
        if let clusterID, header.clusterID != 0, header.clusterID != clusterID {
            return .otherCluster(etcd: header.clusterID, mirror: clusterID)
        }
        // 0: an answer without a header (a gateway error page), which tells nothing.
        if header.revision > 0, header.revision < cursor {
            return .revisionBelowMirror(etcd: header.revision, mirror: cursor)
        }
        if header.memberID != 0, header.raftTerm != 0, let seen = terms[header.memberID], header.raftTerm < seen {
            return .memberTermBelow(member: header.memberID, etcd: header.raftTerm, seen: seen)
        }
        return nil
    }

    /// Records the raft term of `header`'s member in `terms` (the highest each answered with).
    static func note(_ header: ResponseHeader, in terms: inout [UInt64: UInt64]) {
        guard header.memberID != 0, header.raftTerm > terms[header.memberID] ?? 0 else { return }
        terms[header.memberID] = header.raftTerm
    }

    /// What a watch cancelled at `compactRevision` says when etcd reported `seen` (0: none)
    /// before in the mirror's history: a compaction never moves backwards in one history, so
    /// a lower one means etcd's history started again.
    static func check(compactRevision: Int64, seen: Int64) -> FleetRewind? {
        guard seen > 0, compactRevision < seen else { return nil }
        return .compactionBelowSeen(etcd: compactRevision, seen: seen)
    }

    /// Whether a watch's revision (its creation, a progress notification) is below the cursor,
    /// so a linearizable read should tell whether etcd went back.
    static func isSuspicious(revision: Int64, cursor: Int64) -> Bool {
        revision > 0 && revision < cursor
    }

    /// What a start's first answer says against the mirror's recorded `source` (`PREFIX@HEX`):
    /// the same prefix in another cluster is the fleet gone back in time (a restore with a new
    /// token); another prefix is another fleet (nil here: the caller replaces the mirror).
    static func check(source: String?, prefix: String, answeredBy header: ResponseHeader) -> FleetRewind? {
        guard let source, let at = source.lastIndex(of: "@"), source[..<at] == prefix,
              let recorded = clusterID(ofSource: source), header.clusterID != 0, header.clusterID != recorded else { return nil }
        return .otherCluster(etcd: header.clusterID, mirror: recorded)
    }

    /// The cluster id in a mirror's recorded source (`PREFIX@HEX`, see ``Fleet``).
    static func clusterID(ofSource source: String) -> UInt64? {
        guard let at = source.lastIndex(of: "@") else { return nil }
        return UInt64(source[source.index(after: at)...], radix: 16)
    }

    /// The revision etcd may not answer below in the mirror's history: the cursor, or a key's
    /// revision past it (this host's own write, answered by its txn before the watch brought it
    /// back; a deletion's counts too). The watch's cursor alone misses a wiped etcd that other
    /// hosts wrote back up to it.
    static func highestRevision(cursor: Int64, revisions: some Sequence<FleetRevisions>) -> Int64 {
        revisions.reduce(cursor) { max($0, abs($1.value), abs($1.definition)) }
    }

    /// What a watch check's counts (definitions and values etcd holds at `revision`, the
    /// mirror's cursor, with no change after it) say against the mirror's. Counts that still
    /// differ once the watch was started again there are not a watch that missed a change but a
    /// mirror that holds what etcd does not: etcd was wiped or restored and written back past
    /// every revision this host saw. Once per cursor (`readAgainAtCursor`): a foreign key under
    /// the prefix keeps the counts apart, and must not make the host read etcd forever.
    static func check(counts: (definitions: Int64, values: Int64), mirrored: (definitions: Int, values: Int), at revision: Int64,
                      watchRestartedAtCursor: Bool, readAgainAtCursor: Bool) -> FleetRewind? {
        guard counts.definitions != Int64(mirrored.definitions) || counts.values != Int64(mirrored.values),
              watchRestartedAtCursor, !readAgainAtCursor else { return nil }
        return .mirrorDisagrees(revision: revision, definitions: counts.definitions, values: counts.values,
                                mirrorDefinitions: Int64(mirrored.definitions), mirrorValues: Int64(mirrored.values))
    }

    /// For the log: what etcd's answer showed.
    var description: String {
        switch self {
        case .revisionBelowMirror(let etcd, let mirror):
            "etcd answers at revision \(etcd), below the mirror's \(mirror)"
        case .otherCluster(let etcd, let mirror):
            "etcd answers as cluster \(String(etcd, radix: 16)), not the mirror's \(String(mirror, radix: 16))"
        case .memberTermBelow(let member, let etcd, let seen):
            "etcd member \(String(member, radix: 16)) answers at raft term \(etcd), below the \(seen) it answered with before"
        case .compactionBelowSeen(let etcd, let seen):
            "etcd reports compact revision \(etcd), below the \(seen) it reported before"
        case .mirrorDisagrees(let revision, let definitions, let values, let mirrorDefinitions, let mirrorValues):
            "etcd holds \(definitions) definitions and \(values) values at revision \(revision) against the mirror's "
                + "\(mirrorDefinitions) and \(mirrorValues), with no later change and the watch started again there"
        }
    }
}

/// Lets a line that would repeat through at most once per period, counting the ones held back
/// (a host started while etcd is unreachable retries every second). Pure: the caller passes
/// the time; ``Fleet`` keeps one on its queue.
struct LogThrottle: Sendable {
    /// Nanoseconds between two lines let through.
    let period: UInt64
    private var last: UInt64?
    private var suppressed = 0

    init(seconds: UInt64) { period = seconds * 1_000_000_000 }

    /// The number of lines held back since the last one, when this one may go out at `now`
    /// (uptime nanoseconds); nil when it is held back.
    mutating func admit(at now: UInt64) -> Int? {
        if let last, now &- last < period {
            suppressed += 1
            return nil
        }
        last = now
        defer { suppressed = 0 }
        return suppressed
    }

    /// After a success: the next failure is news and goes out at once.
    mutating func reset() {
        last = nil
        suppressed = 0
    }
}
