/// Checks a value against the D-Bus wire rules before it is marshalled, so libdbus never sees
/// something it would reject with a warning or an abort.
extension DBusValue {
    /// Throws ``ValueError`` when the value cannot be sent on the wire.
    public func validate() throws(ValueError) {
        try validate(arrayDepth: 0, structDepth: 0, variantDepth: 0)
    }

    private func validate(arrayDepth: Int, structDepth: Int, variantDepth: Int) throws(ValueError) {
        switch self {
        case .string(let s):
            guard !s.utf8.contains(0) else { throw ValueError("string contains a NUL byte") }
        case .objectPath(let p):
            guard ObjectPath.isValid(p) else { throw ValueError("'\(p)' is not a valid object path") }
        case .signature(let g):
            do { _ = try Signature(validating: g) } catch { throw ValueError(error.description) }
        case .variant(let inner):
            // The spec caps total nesting at 64 including variants.
            guard arrayDepth + structDepth + variantDepth < 64 else { throw ValueError("variants nested too deeply") }
            try inner.validate(arrayDepth: 0, structDepth: 0, variantDepth: variantDepth + arrayDepth + structDepth + 1)
        case .array(let element, let items):
            guard arrayDepth < Signature.maximumDepth else { throw ValueError("arrays nested deeper than 32") }
            for item in items {
                guard item.type == element else {
                    throw ValueError("array of '\(element.signature)' holds a '\(item.signature)'")
                }
                try item.validate(arrayDepth: arrayDepth + 1, structDepth: structDepth, variantDepth: variantDepth)
            }
        case .dictionary(let keyType, let valueType, let entries):
            guard keyType.isBasic else { throw ValueError("dict key type '\(keyType.signature)' is not basic") }
            guard arrayDepth < Signature.maximumDepth else { throw ValueError("arrays nested deeper than 32") }
            for entry in entries {
                guard entry.key.type == keyType, entry.value.type == valueType else {
                    throw ValueError("dict a{\(keyType.signature)\(valueType.signature)} holds an entry {\(entry.key.signature)\(entry.value.signature)}")
                }
                try entry.key.validate(arrayDepth: arrayDepth + 1, structDepth: structDepth, variantDepth: variantDepth)
                try entry.value.validate(arrayDepth: arrayDepth + 1, structDepth: structDepth, variantDepth: variantDepth)
            }
        case .structure(let fields):
            guard !fields.isEmpty else { throw ValueError("empty struct") }
            guard structDepth < Signature.maximumDepth else { throw ValueError("structs nested deeper than 32") }
            for field in fields {
                try field.validate(arrayDepth: arrayDepth, structDepth: structDepth + 1, variantDepth: variantDepth)
            }
        default:
            break
        }
        if case .structure = self, signature.utf8.count > Signature.maximumLength {
            throw ValueError("signature longer than 255 bytes")
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

    static func alignment(of type: DBusType) -> Int {
        switch type {
        case .byte, .signature, .variant: 1
        case .int16, .uint16: 2
        case .boolean, .int32, .uint32, .unixFD, .string, .objectPath, .array: 4
        case .int64, .uint64, .double, .structure, .dictionary: 8
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
