import JSON

/// A read of one key, a range or a prefix (etcdserverpb.RangeRequest).
public struct RangeRequest: Equatable, Sendable {
    /// The key, or the first key of the range.
    public var key: [UInt8]
    /// The end of the range (exclusive); nil reads `key` alone.
    public var rangeEnd: [UInt8]?
    /// Read the store as it was at this revision; 0 reads the latest.
    public var revision: Int64
    /// At most this many keys; 0 means no limit.
    public var limit: Int64
    /// Return only the count of keys.
    public var countOnly: Bool
    /// Served by the member alone, without a quorum round (may be stale).
    public var serializable: Bool
    /// Only keys last changed at or after this revision (0: no filter). etcd filters after
    /// reading the range, so `limit` still applies to what is left, but `countOnly` counts
    /// every key.
    public var minModRevision: Int64 = 0

    /// Reads `key`, or every key starting with `key` when `prefix` is true.
    public init(key: [UInt8], prefix: Bool = false, revision: Int64 = 0, limit: Int64 = 0,
                countOnly: Bool = false, serializable: Bool = false) {
        self.key = key
        self.rangeEnd = prefix ? RangeRequest.prefixEnd(of: key) : nil
        self.revision = revision
        self.limit = limit
        self.countOnly = countOnly
        self.serializable = serializable
    }

    /// The first key after every key that starts with `prefix` (etcd's `GetPrefixRangeEnd`):
    /// the last byte below 0xFF incremented, what follows dropped; `[0]` (every key from
    /// `prefix` on) when there is none.
    public static func prefixEnd(of prefix: [UInt8]) -> [UInt8] {
        var end = prefix
        while let last = end.last {
            if last < 0xFF {
                end[end.count - 1] = last + 1
                return end
            }
            end.removeLast()
        }
        return [0]
    }

    var json: JSONValue {
        var members: [(String, JSONValue)] = [("key", .bytes(key))]
        if let rangeEnd { members.append(("range_end", .bytes(rangeEnd))) }
        if revision != 0 { members.append(("revision", .int64(revision))) }
        if limit != 0 { members.append(("limit", .int64(limit))) }
        if countOnly { members.append(("count_only", .bool(true))) }
        if serializable { members.append(("serializable", .bool(true))) }
        if minModRevision != 0 { members.append(("min_mod_revision", .int64(minModRevision))) }
        return .object(members)
    }
}
