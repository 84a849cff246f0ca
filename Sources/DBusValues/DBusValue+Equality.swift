/// Values are equal when they are the same bytes on the wire.
///
/// Swift's own `String ==` uses Unicode canonical equivalence ("é" precomposed equals "e" with a
/// combining accent) and `Double ==` IEEE comparison (NaN is unequal to itself, −0.0 equals 0.0).
/// A D-Bus client sees bytes, so a write that changes them is a change, and rewriting the same
/// NaN is not: strings compare by their UTF-8 bytes and doubles by their bit patterns, as
/// GDBus's `g_variant_equal` does.
extension DBusValue {
    public static func == (lhs: DBusValue, rhs: DBusValue) -> Bool {
        switch (lhs, rhs) {
        case (.byte(let a), .byte(let b)): a == b
        case (.boolean(let a), .boolean(let b)): a == b
        case (.int16(let a), .int16(let b)): a == b
        case (.uint16(let a), .uint16(let b)): a == b
        case (.int32(let a), .int32(let b)): a == b
        case (.uint32(let a), .uint32(let b)): a == b
        case (.int64(let a), .int64(let b)): a == b
        case (.uint64(let a), .uint64(let b)): a == b
        case (.double(let a), .double(let b)): a.bitPattern == b.bitPattern
        case (.string(let a), .string(let b)), (.objectPath(let a), .objectPath(let b)), (.signature(let a), .signature(let b)):
            Self.sameBytes(a, b)
        case (.unixFD(let a), .unixFD(let b)): a == b
        case (.variant(let a), .variant(let b)): a == b
        case (.array(let e1, let a), .array(let e2, let b)): e1 == e2 && a == b
        case (.bytes(let a), .bytes(let b)): a == b
        case (.dictionary(let k1, let v1, let a), .dictionary(let k2, let v2, let b)): k1 == k2 && v1 == v2 && a == b
        case (.structure(let a), .structure(let b)): a == b
        default: false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .byte(let v): hasher.combine(0 as UInt8); hasher.combine(v)
        case .boolean(let v): hasher.combine(1 as UInt8); hasher.combine(v)
        case .int16(let v): hasher.combine(2 as UInt8); hasher.combine(v)
        case .uint16(let v): hasher.combine(3 as UInt8); hasher.combine(v)
        case .int32(let v): hasher.combine(4 as UInt8); hasher.combine(v)
        case .uint32(let v): hasher.combine(5 as UInt8); hasher.combine(v)
        case .int64(let v): hasher.combine(6 as UInt8); hasher.combine(v)
        case .uint64(let v): hasher.combine(7 as UInt8); hasher.combine(v)
        case .double(let v): hasher.combine(8 as UInt8); hasher.combine(v.bitPattern)
        case .string(let v): hasher.combine(9 as UInt8); Self.hashBytes(v, into: &hasher)
        case .objectPath(let v): hasher.combine(10 as UInt8); Self.hashBytes(v, into: &hasher)
        case .signature(let v): hasher.combine(11 as UInt8); Self.hashBytes(v, into: &hasher)
        case .unixFD(let v): hasher.combine(12 as UInt8); hasher.combine(v)
        case .variant(let v): hasher.combine(13 as UInt8); hasher.combine(v)
        case .array(let element, let items): hasher.combine(14 as UInt8); hasher.combine(element); hasher.combine(items)
        case .bytes(let v): hasher.combine(15 as UInt8); hasher.combine(v)
        case .dictionary(let key, let value, let entries):
            hasher.combine(16 as UInt8); hasher.combine(key); hasher.combine(value); hasher.combine(entries)
        case .structure(let fields): hasher.combine(17 as UInt8); hasher.combine(fields)
        }
    }

    /// Whether two strings hold the same UTF-8 bytes (not merely canonically equivalent text).
    static func sameBytes(_ a: String, _ b: String) -> Bool {
        a.utf8.count == b.utf8.count && a.utf8.elementsEqual(b.utf8)
    }

    private static func hashBytes(_ text: String, into hasher: inout Hasher) {
        hasher.combine(text.utf8.count)
        if text.utf8.withContiguousStorageIfAvailable({ hasher.combine(bytes: UnsafeRawBufferPointer($0)) }) == nil {
            for byte in text.utf8 { hasher.combine(byte) }
        }
    }
}
