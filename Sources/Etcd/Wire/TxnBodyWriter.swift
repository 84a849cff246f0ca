/// A txn's request body written straight into one byte buffer, in exactly the text
/// `JSONValue.serialized()` makes of the gateway's JSON tree of the txn (`compare`, `success`,
/// `failure`, each of the values' `json`, in that order; GatewayEncodingTests compares them): a fleet write's txn is built on the D-Bus queue, on the
/// path of every Set, and the tree (its arrays, strings and their release) cost more than the
/// text itself. Every string it writes is base64, a decimal or a fixed name: nothing to escape.
struct TxnBodyWriter {
    private(set) var bytes: [UInt8] = []

    /// The body of a txn of `compares`, `success` and `failure`.
    static func body(compares: [Compare], success: [RequestOp], failure: [RequestOp]) -> [UInt8] {
        var writer = TxnBodyWriter()
        writer.bytes.reserveCapacity(256 + 160 * (compares.count + success.count + failure.count))
        writer.raw("{")
        writer.section("\"compare\":[", compares, after: false) { $0.write($1) }
        writer.section("\"success\":[", success, after: !compares.isEmpty) { $0.write($1) }
        writer.section("\"failure\":[", failure, after: !compares.isEmpty || !success.isEmpty) { $0.write($1) }
        writer.raw("}")
        return writer.bytes
    }

    /// A member holding `items` (left out when there are none, as proto3 JSON does).
    private mutating func section<T>(_ opening: StaticString, _ items: [T], after earlier: Bool, _ write: (inout TxnBodyWriter, T) -> Void) {
        guard !items.isEmpty else { return }
        if earlier { raw(",") }
        raw(opening)
        for (index, item) in items.enumerated() {
            if index > 0 { raw(",") }
            write(&self, item)
        }
        raw("]")
    }

    mutating func raw(_ text: StaticString) {
        text.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    mutating func raw(_ text: String) {
        bytes.append(contentsOf: text.utf8)
    }

    /// `"name":"BASE64"` (a proto3 bytes field), after a comma unless it is the first member.
    mutating func field(_ name: StaticString, bytes value: [UInt8], first: Bool = false) {
        if !first { raw(",") }
        raw("\""); raw(name); raw("\":\"")
        Base64.encode(value, into: &bytes)
        raw("\"")
    }

    /// `"name":"DECIMAL"` (a proto3 int64 field).
    mutating func field(_ name: StaticString, int64 value: Int64) {
        raw(",\""); raw(name); raw("\":\"")
        raw(String(value))
        raw("\"")
    }

    /// `"name":"TEXT"` for a fixed name (an enum's).
    mutating func field(_ name: StaticString, name text: String) {
        raw(",\""); raw(name); raw("\":\"")
        raw(text)
        raw("\"")
    }

    /// `"name":true`.
    mutating func field(_ name: StaticString, true: Void) {
        raw(",\""); raw(name); raw("\":true")
    }

    mutating func write(_ compare: Compare) {
        raw("{")
        field("key", bytes: compare.key, first: true)
        // EQUAL, the relation of every fleet compare, is the enum's 0: proto3 JSON leaves it out
        // (17 bytes of each compare, on every write's path).
        if compare.relation != .equal { field("result", name: compare.relation.rawValue) }
        switch compare.target {
        case let .version(value): field("target", name: "VERSION"); field("version", int64: value)
        case let .createRevision(value): field("target", name: "CREATE"); field("create_revision", int64: value)
        case let .modRevision(value): field("target", name: "MOD"); field("mod_revision", int64: value)
        case let .value(value): field("target", name: "VALUE"); field("value", bytes: value)
        case let .lease(value): field("target", name: "LEASE"); field("lease", int64: value)
        }
        if let rangeEnd = compare.rangeEnd { field("range_end", bytes: rangeEnd) }
        raw("}")
    }

    mutating func write(_ op: RequestOp) {
        switch op {
        case let .range(request):
            raw("{\"request_range\":{")
            field("key", bytes: request.key, first: true)
            if let rangeEnd = request.rangeEnd { field("range_end", bytes: rangeEnd) }
            if request.revision != 0 { field("revision", int64: request.revision) }
            if request.limit != 0 { field("limit", int64: request.limit) }
            if request.countOnly { field("count_only", true: ()) }
            if request.serializable { field("serializable", true: ()) }
            if request.minModRevision != 0 { field("min_mod_revision", int64: request.minModRevision) }
        case let .put(request):
            raw("{\"request_put\":{")
            field("key", bytes: request.key, first: true)
            field("value", bytes: request.value)
            if request.lease != 0 { field("lease", int64: request.lease) }
            if request.prevKV { field("prev_kv", true: ()) }
        case let .deleteRange(request):
            raw("{\"request_delete_range\":{")
            field("key", bytes: request.key, first: true)
            if let rangeEnd = request.rangeEnd { field("range_end", bytes: rangeEnd) }
            if request.prevKV { field("prev_kv", true: ()) }
        }
        raw("}}")
    }
}
