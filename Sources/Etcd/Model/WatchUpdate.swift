/// What a ``WatchStream`` reports to its handler, in order.
public enum WatchUpdate: Equatable, Sendable {
    /// The watch is (again) established on `endpoint`; events from the stream's next revision on
    /// follow. Reported after every reconnection.
    case created(endpoint: String, revision: Int64)
    /// Changes, in revision order; all events of one etcd revision (one txn) come in one
    /// update. `revision` is the store's revision when etcd sent them.
    case events([WatchEvent], revision: Int64)
    /// A progress notification: every change up to `revision` has been delivered.
    case progress(revision: Int64)
    /// The connection was lost or the member has no leader; the stream reconnects (next
    /// endpoint, after a pause that grows while no member answers) and resumes after the last
    /// delivered revision.
    case interrupted(EtcdError)
    /// etcd compacted past the revision the watch needed. Final: the stream has ended; read
    /// the whole range again at one revision and watch from there.
    case compacted(compactRevision: Int64)
    /// etcd cancelled the watch for another reason (for example permission). Final.
    case failed(EtcdError)
}
