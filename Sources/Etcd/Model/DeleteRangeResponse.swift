import JSON

/// The answer to a ``DeleteRangeRequest``.
public struct DeleteRangeResponse: Equatable, Sendable {
    /// The revision the deletion created (unchanged if nothing was deleted).
    public var header: ResponseHeader
    /// How many keys were deleted.
    public var deleted: Int64
    /// The deleted keys, if asked for.
    public var prevKVs: [KeyValue]

    init(json: JSONValue) throws(EtcdError) {
        header = ResponseHeader(json: json["header"])
        deleted = json["deleted"]?.int64 ?? 0
        var prevKVs: [KeyValue] = []
        for item in json["prev_kvs"]?.elements ?? [] { prevKVs.append(try KeyValue(json: item)) }
        self.prevKVs = prevKVs
    }
}
