import JSON

/// The answer to one ``RequestOp`` of a transaction, in the same position.
public enum ResponseOp: Equatable, Sendable {
    /// The answer to a read.
    case range(RangeResponse)
    /// The answer to a write.
    case put(PutResponse)
    /// The answer to a deletion.
    case deleteRange(DeleteRangeResponse)

    init(json: JSONValue) throws(EtcdError) {
        if let range = json["response_range"] {
            self = .range(try RangeResponse(json: range))
        } else if let put = json["response_put"] {
            self = .put(try PutResponse(json: put))
        } else if let delete = json["response_delete_range"] {
            self = .deleteRange(try DeleteRangeResponse(json: delete))
        } else {
            throw EtcdError(.malformedResponse, "etcd sent a txn response of an unknown kind: \(json.text)")
        }
    }
}
