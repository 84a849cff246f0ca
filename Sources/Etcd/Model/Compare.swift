import JSON

/// One condition of a transaction (etcdserverpb.Compare): a key's revision, version, value or
/// lease against a constant.
///
/// A key that does not exist has version, create and mod revision 0, so
/// `Compare(key, .modRevision, .equal, 0)` means "the key is absent".
public struct Compare: Equatable, Sendable {
    /// What to compare with.
    public enum Target: Equatable, Sendable {
        /// The key's version (writes since creation).
        case version(Int64)
        /// The revision of the key's creation.
        case createRevision(Int64)
        /// The revision of the key's last change.
        case modRevision(Int64)
        /// The key's value.
        case value([UInt8])
        /// The key's lease id.
        case lease(Int64)
    }

    /// How the key's field must relate to the constant.
    public enum Relation: String, Equatable, Sendable {
        /// The field equals the constant.
        case equal = "EQUAL"
        /// The field is greater than the constant.
        case greater = "GREATER"
        /// The field is less than the constant.
        case less = "LESS"
        /// The field differs from the constant.
        case notEqual = "NOT_EQUAL"
    }

    /// The key (or the start of the range) compared.
    public var key: [UInt8]
    /// The end of a range of keys, every key of which must satisfy the condition; nil for one key.
    public var rangeEnd: [UInt8]?
    /// The relation.
    public var relation: Relation
    /// The field and constant.
    public var target: Target

    /// Creates a condition: `key`'s field `relation` constant.
    public init(_ key: [UInt8], _ relation: Relation, _ target: Target, rangeEnd: [UInt8]? = nil) {
        self.key = key
        self.relation = relation
        self.target = target
        self.rangeEnd = rangeEnd
    }

    /// "`key` was last changed at `revision`" (0: the key does not exist): the guard of an
    /// optimistic write.
    public static func modRevision(of key: [UInt8], is revision: Int64) -> Compare {
        Compare(key, .equal, .modRevision(revision))
    }

    var json: JSONValue {
        // EQUAL is the enum's 0, which proto3 JSON leaves out (as TxnBodyWriter does).
        var members: [(String, JSONValue)] = [("key", .bytes(key))]
        if relation != .equal { members.append(("result", .string(relation.rawValue))) }
        switch target {
        case let .version(value): members += [("target", .string("VERSION")), ("version", .int64(value))]
        case let .createRevision(value): members += [("target", .string("CREATE")), ("create_revision", .int64(value))]
        case let .modRevision(value): members += [("target", .string("MOD")), ("mod_revision", .int64(value))]
        case let .value(value): members += [("target", .string("VALUE")), ("value", .bytes(value))]
        case let .lease(value): members += [("target", .string("LEASE")), ("lease", .int64(value))]
        }
        if let rangeEnd { members.append(("range_end", .bytes(rangeEnd))) }
        return .object(members)
    }
}
