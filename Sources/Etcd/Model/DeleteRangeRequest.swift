import JSON

/// A deletion of one key, a range or a prefix (etcdserverpb.DeleteRangeRequest).
public struct DeleteRangeRequest: Equatable, Sendable {
    /// The key, or the first key of the range.
    public var key: [UInt8]
    /// The end of the range (exclusive); nil deletes `key` alone.
    public var rangeEnd: [UInt8]?
    /// Return the deleted keys.
    public var prevKV: Bool

    /// Deletes `key`, or every key starting with `key` when `prefix` is true.
    public init(key: [UInt8], prefix: Bool = false, prevKV: Bool = false) {
        self.key = key
        self.rangeEnd = prefix ? RangeRequest.prefixEnd(of: key) : nil
        self.prevKV = prevKV
    }

    var json: JSONValue {
        var members: [(String, JSONValue)] = [("key", .bytes(key))]
        if let rangeEnd { members.append(("range_end", .bytes(rangeEnd))) }
        if prevKV { members.append(("prev_kv", .bool(true))) }
        return .object(members)
    }
}
