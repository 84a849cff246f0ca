import JSON

/// The answer to a ``PutRequest``.
public struct PutResponse: Equatable, Sendable {
    /// The revision the write created.
    public var header: ResponseHeader
    /// The key before the write, if asked for and it existed.
    public var prevKV: KeyValue?

    init(json: JSONValue) throws(EtcdError) {
        header = ResponseHeader(json: json["header"])
        prevKV = try json["prev_kv"].map { (item) throws(EtcdError) in try KeyValue(json: item) }
    }
}
