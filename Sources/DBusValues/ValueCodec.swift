/// The byte encoding of a ``DBusValue`` that the store and the fleet share: compact,
/// self-describing and exact.
///
/// Layout: a format byte (1), the value's signature (one length byte, then its ASCII text), then
/// the payload. Payloads are little-endian; doubles are stored by bit pattern, so every double
/// (NaN payloads and -0.0 included) and every 64-bit integer reads back unchanged. Strings,
/// arrays and dictionaries carry a 32-bit count; a variant carries its inner signature and value.
public enum ValueCodec {
    static let format: UInt8 = 1

    /// Encodes `value` with its signature.
    public static func encode(_ value: DBusValue) -> [UInt8] {
        var output: [UInt8] = [format]
        writeSignature(value.signature, to: &output)
        write(value, to: &output)
        return output
    }

    /// Decodes bytes written by ``encode(_:)``; throws on anything malformed or truncated.
    public static func decode(_ bytes: [UInt8]) throws(ValueCodecError) -> DBusValue {
        var reader = Reader(bytes: bytes)
        guard try reader.byte() == format else { throw ValueCodecError("unknown value format \(bytes[0])") }
        let type = try reader.type()
        let value = try reader.value(of: type)
        guard reader.offset == bytes.count else { throw ValueCodecError("\(bytes.count - reader.offset) trailing bytes") }
        return value
    }

    private static func writeSignature(_ signature: String, to output: inout [UInt8]) {
        // D-Bus signatures are at most 255 bytes, so one length byte suffices.
        let bytes = Array(signature.utf8)
        output.append(UInt8(bytes.count))
        output.append(contentsOf: bytes)
    }

    private static func writeInteger<T: FixedWidthInteger>(_ value: T, to output: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { output.append(contentsOf: $0) }
    }

    private static func writeCount(_ count: Int, to output: inout [UInt8]) {
        writeInteger(UInt32(truncatingIfNeeded: count), to: &output)
    }

    private static func write(_ value: DBusValue, to output: inout [UInt8]) {
        switch value {
        case .byte(let v): output.append(v)
        case .boolean(let v): output.append(v ? 1 : 0)
        case .int16(let v): writeInteger(v, to: &output)
        case .uint16(let v): writeInteger(v, to: &output)
        case .int32(let v): writeInteger(v, to: &output)
        case .uint32(let v): writeInteger(v, to: &output)
        case .int64(let v): writeInteger(v, to: &output)
        case .uint64(let v): writeInteger(v, to: &output)
        case .unixFD(let v): writeInteger(v, to: &output)
        case .double(let v): writeInteger(v.bitPattern, to: &output)
        case .string(let s), .objectPath(let s), .signature(let s):
            let bytes = Array(s.utf8)
            writeCount(bytes.count, to: &output)
            output.append(contentsOf: bytes)
        case .variant(let inner):
            writeSignature(inner.signature, to: &output)
            write(inner, to: &output)
        case .array(_, let items):
            writeCount(items.count, to: &output)
            for item in items { write(item, to: &output) }
        case .bytes(let bytes):
            writeCount(bytes.count, to: &output)
            output.append(contentsOf: bytes)
        case .dictionary(_, _, let entries):
            writeCount(entries.count, to: &output)
            for entry in entries {
                write(entry.key, to: &output)
                write(entry.value, to: &output)
            }
        case .structure(let fields):
            for field in fields { write(field, to: &output) }
        }
    }

    private struct Reader {
        let bytes: [UInt8]
        var offset = 0

        static let basicTypes: [UInt8: DBusType] = Dictionary(uniqueKeysWithValues: ([
            .byte, .boolean, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double,
            .string, .objectPath, .signature, .unixFD, .variant,
        ] as [DBusType]).map { (UInt8(ascii: Unicode.Scalar($0.signature)!), $0) })

        mutating func byte() throws(ValueCodecError) -> UInt8 {
            guard offset < bytes.count else { throw ValueCodecError("truncated at byte \(offset)") }
            defer { offset += 1 }
            return bytes[offset]
        }

        mutating func take(_ count: Int) throws(ValueCodecError) -> ArraySlice<UInt8> {
            guard count >= 0, bytes.count - offset >= count else { throw ValueCodecError("truncated at byte \(offset)") }
            defer { offset += count }
            return bytes[offset..<offset + count]
        }

        mutating func integer<T: FixedWidthInteger>(_: T.Type = T.self) throws(ValueCodecError) -> T {
            let slice = try take(MemoryLayout<T>.size)
            var value = T.zero
            for (shift, byte) in slice.enumerated() { value |= T(truncatingIfNeeded: byte) << (8 * shift) }
            return value
        }

        mutating func count() throws(ValueCodecError) -> Int {
            let count = Int(try integer(UInt32.self))
            // Every element takes at least one byte except empty structs, which D-Bus forbids;
            // this bounds allocations by the input size.
            guard count <= bytes.count - offset else { throw ValueCodecError("count \(count) exceeds the data at byte \(offset)") }
            return count
        }

        mutating func text() throws(ValueCodecError) -> String {
            let slice = try take(count())
            guard let text = String(validating: slice, as: UTF8.self) else { throw ValueCodecError("invalid UTF-8 at byte \(offset)") }
            return text
        }

        mutating func type() throws(ValueCodecError) -> DBusType {
            let length = Int(try byte())
            // Most stored signatures are one basic type; skip the signature parser for them.
            if length == 1, offset < bytes.count, let basic = Self.basicTypes[bytes[offset]] {
                offset += 1
                return basic
            }
            guard let signature = String(validating: try take(length), as: UTF8.self) else {
                throw ValueCodecError("invalid signature at byte \(offset)")
            }
            do { return try DBusType(parsing: signature) } catch {
                throw ValueCodecError("invalid signature '\(signature)'")
            }
        }

        mutating func value(of type: DBusType) throws(ValueCodecError) -> DBusValue {
            switch type {
            case .byte: return .byte(try byte())
            case .boolean:
                switch try byte() {
                case 0: return .boolean(false)
                case 1: return .boolean(true)
                case let other: throw ValueCodecError("invalid boolean \(other)")
                }
            case .int16: return .int16(try integer())
            case .uint16: return .uint16(try integer())
            case .int32: return .int32(try integer())
            case .uint32: return .uint32(try integer())
            case .int64: return .int64(try integer())
            case .uint64: return .uint64(try integer())
            case .unixFD: return .unixFD(try integer())
            case .double: return .double(Double(bitPattern: try integer()))
            case .string: return .string(try text())
            case .objectPath: return .objectPath(try text())
            case .signature: return .signature(try text())
            case .variant:
                let inner = try self.type()
                return .variant(try value(of: inner))
            case .array(.byte):
                return .bytes(Array(try take(count())))
            case .array(let element):
                let count = try count()
                var items: [DBusValue] = []
                items.reserveCapacity(count)
                for _ in 0..<count { items.append(try value(of: element)) }
                return .array(element: element, items)
            case .dictionary(let keyType, let valueType):
                let count = try count()
                var entries: [DictionaryEntry] = []
                entries.reserveCapacity(count)
                for _ in 0..<count {
                    let key = try value(of: keyType)
                    entries.append(DictionaryEntry(key, try value(of: valueType)))
                }
                return .dictionary(key: keyType, value: valueType, entries)
            case .structure(let fields):
                var values: [DBusValue] = []
                for field in fields { values.append(try value(of: field)) }
                return .structure(values)
            }
        }
    }
}

/// Encoded bytes that cannot be decoded (or, from a store, decode to what it does not hold).
public struct ValueCodecError: Error, Sendable, CustomStringConvertible {
    /// What is wrong, with the byte offset.
    public var reason: String

    /// An error saying `reason`.
    public init(_ reason: String) { self.reason = reason }

    /// The reason.
    public var description: String { reason }
}
