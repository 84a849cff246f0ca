import JSON

/// The header of every etcd response: which store revision the answer reflects.
public struct ResponseHeader: Equatable, Sendable {
    /// The store's revision when the request was served (for a write, the revision it created).
    public var revision: Int64
    /// The cluster's id.
    public var clusterID: UInt64
    /// The id of the member that answered.
    public var memberID: UInt64
    /// The raft term when the request was served.
    public var raftTerm: UInt64

    /// Creates a header.
    public init(revision: Int64, clusterID: UInt64 = 0, memberID: UInt64 = 0, raftTerm: UInt64 = 0) {
        self.revision = revision
        self.clusterID = clusterID
        self.memberID = memberID
        self.raftTerm = raftTerm
    }

    init(json: JSONValue?) {
        func unsigned(_ name: String) -> UInt64 { UInt64(bitPattern: json?[name]?.int64 ?? 0) }
        self.init(revision: json?["revision"]?.int64 ?? 0, clusterID: unsigned("cluster_id"),
                  memberID: unsigned("member_id"), raftTerm: unsigned("raft_term"))
    }
}
