import JSON

/// The answer to a ``RangeRequest``.
public struct RangeResponse: Equatable, Sendable {
    /// The revision the read reflects.
    public var header: ResponseHeader
    /// The keys found, in key order.
    public var kvs: [KeyValue]
    /// How many keys the range holds (more than `kvs.count` when a limit cut it).
    public var count: Int64
    /// Whether a limit left keys out.
    public var more: Bool

    /// An answer as a fake etcd makes it.
    public init(header: ResponseHeader, kvs: [KeyValue] = [], count: Int64? = nil, more: Bool = false) {
        self.header = header
        self.kvs = kvs
        self.count = count ?? Int64(kvs.count)
        self.more = more
    }

    init(json: JSONValue) throws(EtcdError) {
        header = ResponseHeader(json: json["header"])
        var kvs: [KeyValue] = []
        for item in json["kvs"]?.elements ?? [] { kvs.append(try KeyValue(json: item)) }
        self.kvs = kvs
        count = json["count"]?.int64 ?? 0
        more = json["more"]?.boolValue ?? false
    }
}
