import JSON

/// The gateway's JSON is proto3's JSON mapping: 64-bit integers travel as strings (so a
/// revision never passes through a `Double`), bytes as base64, and a field at its default
/// value (0, false, empty) is left out. These read and write fields that way.
extension JSONValue {
    /// The elements of an array; an absent (proto3: empty) array is `[]`.
    var elements: [JSONValue] { arrayValue ?? [] }

    /// A proto3 int64/uint64 field: a string or a number; absent means 0 (the caller's `?? 0`).
    /// A uint64 above `Int64.max` keeps its bits.
    var int64: Int64? {
        switch self {
        case let .string(text): Int64(text) ?? UInt64(text).map { Int64(bitPattern: $0) }
        case let .integer(value): value
        case let .unsignedInteger(value): Int64(bitPattern: value)
        default: nil
        }
    }

    /// A proto3 bytes field (base64); absent means empty.
    var bytes: [UInt8]? {
        guard case let .string(text) = self else { return nil }
        return Base64.decode(text)
    }

    /// The compact JSON text of this value.
    var text: String { serialized() }

    /// A proto3 int64 as the gateway expects it: a JSON string.
    static func int64(_ value: Int64) -> JSONValue { .string(String(value)) }

    /// A proto3 bytes field: base64 text.
    static func bytes(_ value: [UInt8]) -> JSONValue { .string(Base64.encode(value)) }

    /// Parses one gateway answer or one line of a stream; malformed text is etcd's fault.
    static func gatewayMessage(_ bytes: some Collection<UInt8>) throws(EtcdError) -> JSONValue {
        do {
            return try JSONValue.parse(utf8: bytes)
        } catch {
            throw EtcdError(.malformedResponse, "etcd sent malformed JSON at byte \(error.offset): \(error.reason)")
        }
    }
}
