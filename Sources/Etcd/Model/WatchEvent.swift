import JSON

/// One change seen by a watch (mvccpb.Event).
public struct WatchEvent: Equatable, Sendable {
    /// Whether the key was written or deleted.
    public enum Kind: Equatable, Sendable {
        /// The key was created or written.
        case put
        /// The key was deleted (or its lease ended).
        case delete
    }

    /// Written or deleted.
    public var kind: Kind
    /// The key after the change; for a delete only `key` and `modRevision` (the deletion's
    /// revision) are set.
    public var kv: KeyValue
    /// The key before the change, when the watch asked for it.
    public var prevKV: KeyValue?

    /// Creates an event.
    public init(kind: Kind, kv: KeyValue, prevKV: KeyValue? = nil) {
        self.kind = kind
        self.kv = kv
        self.prevKV = prevKV
    }

    init(json: JSONValue) throws(EtcdError) {
        // proto3 JSON leaves out the enum's zero value: no "type" means PUT.
        kind = json["type"]?.stringValue == "DELETE" ? .delete : .put
        kv = try KeyValue(json: json["kv"] ?? [:])
        prevKV = try json["prev_kv"].map { (item) throws(EtcdError) in try KeyValue(json: item) }
    }
}
