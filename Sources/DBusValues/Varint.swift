/// Unsigned LEB128 numbers: seven bits a byte, the lowest first, the high bit set on every
/// byte but the last. Compact records that are not ValueCodec's (a fleet value's attribution,
/// history's packed index rows) write their numbers this way.
public enum Varint {
    /// Appends `value` in 1 to 10 bytes.
    @inlinable
    public static func append(_ value: UInt64, to bytes: inout [UInt8]) {
        var rest = value
        while rest >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        bytes.append(UInt8(rest))
    }

    /// The number at `offset`, which moves past it; `nil` (and `offset` left anywhere) when the
    /// bytes end before its last byte or it does not fit 64 bits.
    @inlinable
    public static func read<Bytes: Collection>(_ bytes: Bytes, at offset: inout Bytes.Index) -> UInt64? where Bytes.Element == UInt8 {
        var value: UInt64 = 0
        for shift in stride(from: 0, to: 64, by: 7) {
            guard offset < bytes.endIndex else { return nil }
            let byte = bytes[offset]
            bytes.formIndex(after: &offset)
            let bits = UInt64(byte & 0x7F)
            // The tenth byte holds the 64th bit only.
            guard shift < 63 || bits <= 1 else { return nil }
            value |= bits << UInt64(shift)
            if byte & 0x80 == 0 { return value }
        }
        return nil
    }
}
