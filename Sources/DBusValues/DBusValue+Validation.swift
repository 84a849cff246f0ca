/// Checks a value against the D-Bus wire rules before it is marshalled, so libdbus never sees
/// something it would reject with a warning or an abort.
extension DBusValue {
    /// The deepest container nesting libdbus accepts in a received body
    /// (`DBUS_MAXIMUM_TYPE_RECURSION_DEPTH * 2`).
    static let maximumTotalDepth = 2 * Signature.maximumDepth

    /// Throws ``ValueError`` when the value cannot be sent on the wire.
    ///
    /// Two things are checked: every item (strings, paths, nested signatures, each item's type
    /// against its container's declared type, the total nesting depth), and the declared type
    /// of each container that starts a signature, so that an empty array of an impossible
    /// element type is refused too.
    public func validate() throws(ValueError) {
        try validateStartingSignature(depth: 0)
    }

    /// Validates a value that starts a signature of its own: the top-level value or a variant's
    /// payload, `depth` containers deep.
    private func validateStartingSignature(depth: Int) throws(ValueError) {
        try validateItems(depth: depth)
        switch self {
        case .array, .dictionary, .structure:
            // Items only show what they hold; the declared type can still be impossible (an
            // empty `a{vs}`, 40 nested empty arrays, 256 bytes of signature). Array and struct
            // depth limits are signature limits, so they are enforced here too.
            // Basic types and `ay` always have a valid signature, so they skip building one.
            let text = signature
            do { _ = try Signature(validating: text) } catch {
                throw ValueError("type '\(text)' is invalid: \(error.reason)")
            }
        default:
            break
        }
    }

    /// Checks the items of a value that `depth` containers enclose.
    ///
    /// The total depth follows libdbus's body validation, which a peer or the bus applies on
    /// receipt: variants, structs, dict entries and non-empty arrays of non-fixed types each
    /// add a level, and no level may go past 64. Arrays of fixed types are checked as a block
    /// without a level of their own.
    private func validateItems(depth: Int) throws(ValueError) {
        switch self {
        case .string(let s):
            guard !s.utf8.contains(0) else { throw ValueError("string contains a NUL byte") }
        case .objectPath(let p):
            guard ObjectPath.isValid(p) else { throw ValueError("'\(p)' is not a valid object path") }
        case .signature(let g):
            do { _ = try Signature(validating: g) } catch { throw ValueError(error.description) }
        case .variant(let inner):
            guard depth < Self.maximumTotalDepth else {
                throw ValueError("variants nested too deeply: more than \(Self.maximumTotalDepth) containers")
            }
            try inner.validateStartingSignature(depth: depth + 1)
        case .array(let element, let items):
            guard element != .byte else {
                throw ValueError("a byte array 'ay' must be .bytes, not .array(element: .byte); build arrays with DBusValue.array(of:_:)")
            }
            if !items.isEmpty, !Self.isFixed(element), depth >= Self.maximumTotalDepth {
                throw ValueError("containers nested more than \(Self.maximumTotalDepth) deep")
            }
            for item in items {
                guard item.type == element else {
                    throw ValueError("array of '\(element.signature)' holds a '\(item.signature)'")
                }
                try item.validateItems(depth: depth + 1)
            }
        case .dictionary(let keyType, let valueType, let entries):
            guard keyType.isBasic else { throw ValueError("dict key type '\(keyType.signature)' is not basic") }
            // Each entry is a container of its own inside the array.
            if !entries.isEmpty, depth + 1 >= Self.maximumTotalDepth {
                throw ValueError("containers nested more than \(Self.maximumTotalDepth) deep")
            }
            for entry in entries {
                guard entry.key.type == keyType, entry.value.type == valueType else {
                    throw ValueError("dict a{\(keyType.signature)\(valueType.signature)} holds an entry {\(entry.key.signature)\(entry.value.signature)}")
                }
                try entry.key.validateItems(depth: depth + 2)
                try entry.value.validateItems(depth: depth + 2)
            }
        case .structure(let fields):
            guard !fields.isEmpty else { throw ValueError("empty struct") }
            guard depth < Self.maximumTotalDepth else {
                throw ValueError("containers nested more than \(Self.maximumTotalDepth) deep")
            }
            for field in fields {
                try field.validateItems(depth: depth + 1)
            }
        default:
            break
        }
    }

    /// Whether `type` is fixed-size (`dbus_type_is_fixed`): arrays of it are one block.
    static func isFixed(_ type: DBusType) -> Bool {
        switch type {
        case .byte, .boolean, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double, .unixFD: true
        default: false
        }
    }

    /// The number of bytes this value occupies when marshalled at `offset` (alignment included).
    ///
    /// Used for value-size limits without building a message.
    public func wireSize(at offset: Int = 0) -> Int {
        func align(_ o: Int, _ a: Int) -> Int { (o + a - 1) / a * a }
        switch self {
        case .byte: return 1
        case .boolean, .int32, .uint32, .unixFD: return align(offset, 4) + 4 - offset
        case .int16, .uint16: return align(offset, 2) + 2 - offset
        case .int64, .uint64, .double: return align(offset, 8) + 8 - offset
        case .string(let s), .objectPath(let s):
            return align(offset, 4) + 4 + s.utf8.count + 1 - offset
        case .signature(let g): return 1 + g.utf8.count + 1
        case .variant(let inner):
            let afterSig = offset + 1 + inner.signature.utf8.count + 1
            return afterSig + inner.wireSize(at: afterSig) - offset
        case .bytes(let b): return align(offset, 4) + 4 + b.count - offset
        case .array(let element, let items):
            var o = align(offset, 4) + 4
            o = align(o, Self.alignment(of: element))
            for item in items { o += item.wireSize(at: o) }
            return o - offset
        case .dictionary(_, _, let entries):
            var o = align(align(offset, 4) + 4, 8)
            for entry in entries {
                o = align(o, 8)
                o += entry.key.wireSize(at: o)
                o += entry.value.wireSize(at: o)
            }
            return o - offset
        case .structure(let fields):
            var o = align(offset, 8)
            for field in fields { o += field.wireSize(at: o) }
            return o - offset
        }
    }

    /// The wire alignment of a value of `type`.
    public static func alignment(of type: DBusType) -> Int {
        switch type {
        case .byte, .signature, .variant: 1
        case .int16, .uint16: 2
        // A `.dictionary` type is the array `a{…}`: aligned as an array; its entries align to 8.
        case .boolean, .int32, .uint32, .unixFD, .string, .objectPath, .array, .dictionary: 4
        case .int64, .uint64, .double, .structure: 8
        }
    }
}

/// A value that breaks the D-Bus wire rules.
public struct ValueError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What is wrong.
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { reason }
}
