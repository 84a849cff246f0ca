/// A lease granted by etcd: keys attached to it are deleted when it expires or is revoked.
public struct Lease: Equatable, Sendable {
    /// The lease id, to attach keys (``PutRequest/lease``) and to keep it alive.
    public var id: Int64
    /// The time to live granted, in seconds.
    public var ttl: Int64

    /// Creates a lease value.
    public init(id: Int64, ttl: Int64) {
        self.id = id
        self.ttl = ttl
    }
}
