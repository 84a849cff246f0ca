import JSON

/// A write of one key (etcdserverpb.PutRequest).
public struct PutRequest: Equatable, Sendable {
    /// The key.
    public var key: [UInt8]
    /// The new value.
    public var value: [UInt8]
    /// Attach the key to this lease (0: none); the key is deleted when the lease ends.
    public var lease: Int64
    /// Return the key as it was before.
    public var prevKV: Bool

    /// Creates a write of `value` to `key`.
    public init(key: [UInt8], value: [UInt8], lease: Int64 = 0, prevKV: Bool = false) {
        self.key = key
        self.value = value
        self.lease = lease
        self.prevKV = prevKV
    }

    var json: JSONValue {
        var members: [(String, JSONValue)] = [("key", .bytes(key)), ("value", .bytes(value))]
        if lease != 0 { members.append(("lease", .int64(lease))) }
        if prevKV { members.append(("prev_kv", .bool(true))) }
        return .object(members)
    }
}
