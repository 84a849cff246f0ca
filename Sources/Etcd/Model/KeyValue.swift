import JSON

/// One key in etcd with its value and revisions (mvccpb.KeyValue).
///
/// Keys and values are bytes: etcd is binary-safe, and the client never assumes UTF-8.
public struct KeyValue: Equatable, Sendable {
    /// The key.
    public var key: [UInt8]
    /// The value (empty for a deleted key in a watch event).
    public var value: [UInt8]
    /// The revision of the key's creation (0 in a delete event).
    public var createRevision: Int64
    /// The revision of the key's last change: the revision to compare against in a txn.
    public var modRevision: Int64
    /// How many times the key was written since its creation (0 in a delete event).
    public var version: Int64
    /// The lease the key is attached to, or 0.
    public var lease: Int64

    /// Creates a key-value.
    public init(key: [UInt8], value: [UInt8] = [], createRevision: Int64 = 0, modRevision: Int64 = 0,
                version: Int64 = 0, lease: Int64 = 0) {
        self.key = key
        self.value = value
        self.createRevision = createRevision
        self.modRevision = modRevision
        self.version = version
        self.lease = lease
    }

    init(json: JSONValue) throws(EtcdError) {
        guard let key = json["key"]?.bytes ?? (json["key"] == nil ? [] : nil),
              let value = json["value"]?.bytes ?? (json["value"] == nil ? [] : nil) else {
            throw EtcdError(.malformedResponse, "etcd sent a key or value that is not base64: \(json.text)")
        }
        self.init(key: key, value: value, createRevision: json["create_revision"]?.int64 ?? 0,
                  modRevision: json["mod_revision"]?.int64 ?? 0, version: json["version"]?.int64 ?? 0,
                  lease: json["lease"]?.int64 ?? 0)
    }
}
