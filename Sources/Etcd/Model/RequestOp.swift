import JSON

/// One operation of a transaction's success or failure branch (etcdserverpb.RequestOp).
public enum RequestOp: Equatable, Sendable {
    /// A read.
    case range(RangeRequest)
    /// A write.
    case put(PutRequest)
    /// A deletion.
    case deleteRange(DeleteRangeRequest)

    /// A write of `value` to `key`.
    public static func put(_ key: [UInt8], _ value: [UInt8], lease: Int64 = 0) -> RequestOp {
        .put(PutRequest(key: key, value: value, lease: lease))
    }

    /// A read of `key`.
    public static func get(_ key: [UInt8]) -> RequestOp {
        .range(RangeRequest(key: key))
    }

    /// A deletion of `key`.
    public static func delete(_ key: [UInt8]) -> RequestOp {
        .deleteRange(DeleteRangeRequest(key: key))
    }

    /// Whether it only reads.
    var isRead: Bool {
        if case .range = self { true } else { false }
    }

    var json: JSONValue {
        switch self {
        case let .range(request): return .object([("request_range", request.json)])
        case let .put(request): return .object([("request_put", request.json)])
        case let .deleteRange(request): return .object([("request_delete_range", request.json)])
        }
    }
}
