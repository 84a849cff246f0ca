/// A JSON value as the etcd gateway sends and receives it.
///
/// Numbers keep their literal text: proto3 JSON sends 64-bit integers as strings, and a
/// revision must never pass through a `Double`. Objects keep their members in order (the
/// gateway's messages are small, a linear lookup is cheaper than hashing).
///
/// Etcd has its own small JSON (rather than reusing PropBus's parser) so that the client
/// depends on nothing but libcurl.
enum GatewayJSON: Equatable, Sendable {
    case null
    case bool(Bool)
    case number(String)
    case string(String)
    case array([GatewayJSON])
    case object([(String, GatewayJSON)])

    static func == (lhs: GatewayJSON, rhs: GatewayJSON) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case let (.bool(a), .bool(b)): return a == b
        case let (.number(a), .number(b)): return a == b
        case let (.string(a), .string(b)): return a == b
        case let (.array(a), .array(b)): return a == b
        case let (.object(a), .object(b)):
            return a.count == b.count && zip(a, b).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        default: return false
        }
    }

    /// The member `name` of an object, or nil (also for a non-object).
    subscript(_ name: String) -> GatewayJSON? {
        guard case let .object(members) = self else { return nil }
        return members.first { $0.0 == name }?.1
    }

    /// The elements of an array; an absent (proto3: empty) array is `[]`.
    var elements: [GatewayJSON] {
        if case let .array(items) = self { return items }
        return []
    }

    /// A proto3 int64/uint64 field: a string or a number; absent means 0.
    var int64: Int64? {
        switch self {
        case let .string(text), let .number(text): return Int64(text) ?? UInt64(text).map { Int64(bitPattern: $0) }
        default: return nil
        }
    }

    /// A proto3 bool field; absent means false.
    var boolValue: Bool {
        if case let .bool(value) = self { return value }
        return false
    }

    /// A proto3 string field.
    var stringValue: String? {
        if case let .string(value) = self { return value }
        return nil
    }

    /// A proto3 bytes field (base64); absent means empty.
    var bytes: [UInt8]? {
        guard case let .string(text) = self else { return nil }
        return Base64.decode(text)
    }

    /// The compact JSON text of this value.
    var text: String {
        var out = ""
        write(to: &out)
        return out
    }

    private func write(to out: inout String) {
        switch self {
        case .null: out += "null"
        case let .bool(value): out += value ? "true" : "false"
        case let .number(text): out += text
        case let .string(value): GatewayJSON.writeString(value, to: &out)
        case let .array(items):
            out += "["
            for (index, item) in items.enumerated() {
                if index > 0 { out += "," }
                item.write(to: &out)
            }
            out += "]"
        case let .object(members):
            out += "{"
            for (index, (name, value)) in members.enumerated() {
                if index > 0 { out += "," }
                GatewayJSON.writeString(name, to: &out)
                out += ":"
                value.write(to: &out)
            }
            out += "}"
        }
    }

    private static func writeString(_ value: String, to out: inout String) {
        out += "\""
        // Base64 keys and values (most of the bytes sent) never need escaping: append them whole.
        if !value.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            out += value
            out += "\""
            return
        }
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        out += "\""
    }

    /// A proto3 int64 as the gateway expects it: a JSON string.
    static func int64(_ value: Int64) -> GatewayJSON { .string(String(value)) }

    /// A proto3 bytes field: base64 text.
    static func bytes(_ value: [UInt8]) -> GatewayJSON { .string(Base64.encode(value)) }

    /// Parses one JSON document (a gateway response or one line of a stream).
    static func parse<Bytes: Collection<UInt8>>(_ bytes: Bytes) throws(EtcdError) -> GatewayJSON {
        var parser = GatewayJSONParser(Array(bytes))
        return try parser.parseDocument()
    }
}

/// A strict recursive-descent parser for ``GatewayJSON``, bounded in depth.
struct GatewayJSONParser {
    private let bytes: [UInt8]
    private var index = 0
    private static let maximumDepth = 64

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    mutating func parseDocument() throws(EtcdError) -> GatewayJSON {
        skipWhitespace()
        let value = try parseValue(depth: 0)
        skipWhitespace()
        guard index == bytes.count else { throw failure("unexpected data after the JSON value") }
        return value
    }

    private func failure(_ reason: String) -> EtcdError {
        EtcdError(.malformedResponse, "etcd sent malformed JSON at byte \(index): \(reason)")
    }

    private var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    private mutating func skipWhitespace() {
        while let byte = current, byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D { index += 1 }
    }

    private mutating func expectLiteral(_ literal: String, _ value: GatewayJSON) throws(EtcdError) -> GatewayJSON {
        for byte in literal.utf8 {
            guard current == byte else { throw failure("expected \(literal)") }
            index += 1
        }
        return value
    }

    private mutating func parseValue(depth: Int) throws(EtcdError) -> GatewayJSON {
        guard depth < Self.maximumDepth else { throw failure("nested too deeply") }
        guard let byte = current else { throw failure("expected a value, found the end") }
        switch byte {
        case UInt8(ascii: "{"): return try parseObject(depth: depth)
        case UInt8(ascii: "["): return try parseArray(depth: depth)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): return try expectLiteral("true", .bool(true))
        case UInt8(ascii: "f"): return try expectLiteral("false", .bool(false))
        case UInt8(ascii: "n"): return try expectLiteral("null", .null)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw failure("unexpected character")
        }
    }

    private mutating func parseObject(depth: Int) throws(EtcdError) -> GatewayJSON {
        index += 1
        var members: [(String, GatewayJSON)] = []
        skipWhitespace()
        if current == UInt8(ascii: "}") {
            index += 1
            return .object(members)
        }
        while true {
            skipWhitespace()
            guard current == UInt8(ascii: "\"") else { throw failure("expected a member name") }
            let name = try parseString()
            skipWhitespace()
            guard current == UInt8(ascii: ":") else { throw failure("expected ':'") }
            index += 1
            skipWhitespace()
            members.append((name, try parseValue(depth: depth + 1)))
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"):
                index += 1
                return .object(members)
            default: throw failure("expected ',' or '}'")
            }
        }
    }

    private mutating func parseArray(depth: Int) throws(EtcdError) -> GatewayJSON {
        index += 1
        var items: [GatewayJSON] = []
        skipWhitespace()
        if current == UInt8(ascii: "]") {
            index += 1
            return .array(items)
        }
        while true {
            skipWhitespace()
            items.append(try parseValue(depth: depth + 1))
            skipWhitespace()
            switch current {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "]"):
                index += 1
                return .array(items)
            default: throw failure("expected ',' or ']'")
            }
        }
    }

    private mutating func parseNumber() throws(EtcdError) -> GatewayJSON {
        let start = index
        if current == UInt8(ascii: "-") { index += 1 }
        var digits = 0
        while let byte = current, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: ".")
            || byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E") || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "-") {
            index += 1
            digits += 1
        }
        guard digits > 0 else { throw failure("expected digits") }
        return .number(String(decoding: bytes[start..<index], as: UTF8.self))
    }

    private mutating func parseHex4() throws(EtcdError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw failure("short \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw failure("bad \\u escape")
            }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }

    private mutating func parseString() throws(EtcdError) -> String {
        index += 1
        var out: [UInt8] = []
        while true {
            guard let byte = current else { throw failure("unterminated string") }
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                return String(decoding: out, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard let escaped = current else { throw failure("unterminated escape") }
                index += 1
                switch escaped {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(escaped)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    var code = try parseHex4()
                    // A surrogate pair is two escapes; a lone surrogate becomes U+FFFD.
                    if (0xD800..<0xDC00).contains(code), index + 6 <= bytes.count,
                       bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") {
                        index += 2
                        let low = try parseHex4()
                        code = (0xDC00..<0xE000).contains(low) ? 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00) : 0xFFFD
                    }
                    let scalar = Unicode.Scalar(code) ?? "\u{FFFD}"
                    out.append(contentsOf: Array(String(scalar).utf8))
                default: throw failure("bad escape")
                }
            default:
                // Copy the run up to the next quote or escape in one go (a base64 value can be
                // megabytes long).
                var end = index
                while end < bytes.count, bytes[end] != UInt8(ascii: "\""), bytes[end] != UInt8(ascii: "\\") { end += 1 }
                out.append(byte)
                out.append(contentsOf: bytes[index..<end])
                index = end
            }
        }
    }
}
