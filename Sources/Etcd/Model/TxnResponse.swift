import JSON

/// The answer to a transaction: which branch ran and what each of its operations returned.
public struct TxnResponse: Equatable, Sendable {
    /// The revision after the transaction (the one its writes created, if any).
    public var header: ResponseHeader
    /// Whether every compare held and the success branch ran. (proto3 JSON leaves the field out
    /// when false: a failed txn has no `succeeded`.)
    public var succeeded: Bool
    /// One answer per operation of the branch that ran.
    public var responses: [ResponseOp]

    /// An answer as a fake etcd (a test's, or any other ``EtcdClient`` stand-in) makes it.
    public init(header: ResponseHeader, succeeded: Bool, responses: [ResponseOp] = []) {
        self.header = header
        self.succeeded = succeeded
        self.responses = responses
    }

    init(json: JSONValue) throws(EtcdError) {
        header = ResponseHeader(json: json["header"])
        succeeded = json["succeeded"]?.boolValue ?? false
        var responses: [ResponseOp] = []
        for item in json["responses"]?.elements ?? [] { responses.append(try ResponseOp(json: item)) }
        self.responses = responses
    }
}
