/// A JSON document, small and exact: integers keep all 64 bits and object members keep their
/// order.
///
/// Foundation's `JSONSerialization` hands numbers back as `NSNumber`, and on Linux a `1` and a
/// `true` can come back indistinguishable; a typed value (a boolean, a 64-bit counter) must
/// stay what it was, so this module parses and prints JSON itself, without Foundation.
///
/// Numbers are held in one canonical case each: a JSON integer literal that fits `Int64` is
/// ``integer(_:)``, one that only fits `UInt64` is ``unsignedInteger(_:)``, and everything
/// else (a fraction, an exponent, or an integer beyond 64 bits) is ``double(_:)``. Build numbers
/// with ``number(_:)`` to get the same normalization.
public indirect enum JSONValue: Hashable, Sendable {
    /// `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// An integer in `Int64` range.
    case integer(Int64)
    /// An integer above `Int64.max`.
    case unsignedInteger(UInt64)
    /// A number written with a fraction or an exponent, or an integer too large for 64 bits.
    ///
    /// Non-finite doubles have no JSON spelling and are printed as `null`.
    case double(Double)
    /// A string.
    case string(String)
    /// An array.
    case array([JSONValue])
    /// An object, its members in document order (duplicate keys are kept as they are).
    case object([Member])

    /// One `"key": value` member of a JSON object.
    public struct Member: Hashable, Sendable {
        /// The member's name.
        public var key: String
        /// The member's value.
        public var value: JSONValue

        /// Creates a member.
        public init(_ key: String, _ value: JSONValue) {
            self.key = key
            self.value = value
        }
    }

    /// An integer as ``integer(_:)`` when it fits `Int64`, as ``unsignedInteger(_:)`` when it fits
    /// `UInt64`, and as ``double(_:)`` otherwise.
    public static func number(_ value: some BinaryInteger) -> JSONValue {
        if let signed = Int64(exactly: value) { return .integer(signed) }
        if let unsigned = UInt64(exactly: value) { return .unsignedInteger(unsigned) }
        return .double(Double(value))
    }

    /// Builds an object from key–value pairs, keeping their order.
    public static func object(_ pairs: [(String, JSONValue)]) -> JSONValue {
        .object(pairs.map { Member($0.0, $0.1) })
    }

    /// The value of the first member named `key`, if this is an object that has one.
    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.key == key }?.value
    }

    /// The element at `index`, if this is an array that long.
    public subscript(index: Int) -> JSONValue? {
        guard case .array(let items) = self, items.indices.contains(index) else { return nil }
        return items[index]
    }

    /// The payload of a ``string(_:)``.
    public var stringValue: String? { if case .string(let s) = self { s } else { nil } }

    /// The payload of a ``bool(_:)``.
    public var boolValue: Bool? { if case .bool(let b) = self { b } else { nil } }

    /// Any number, as a `Double` (large integers round).
    public var doubleValue: Double? {
        switch self {
        case .integer(let i): Double(i)
        case .unsignedInteger(let u): Double(u)
        case .double(let d): d
        default: nil
        }
    }

    /// The payload of an integer that fits `Int64`.
    public var int64Value: Int64? { if case .integer(let i) = self { i } else { nil } }

    /// The elements of an ``array(_:)``.
    public var arrayValue: [JSONValue]? { if case .array(let items) = self { items } else { nil } }

    /// The members of an ``object(_:)``.
    public var objectMembers: [Member]? { if case .object(let members) = self { members } else { nil } }

    /// How deep arrays and objects may nest in parsed text; deeper input is refused rather than
    /// recursed into, so hostile input cannot exhaust the stack.
    public static let maximumDepth = 256

    /// Parses one JSON document (RFC 8259), surrounded by optional whitespace.
    public static func parse(_ text: String) throws(JSONError) -> JSONValue {
        var parser = JSONParser(Array(text.utf8))
        return try parser.parseDocument()
    }

    /// Parses one JSON document from UTF-8 bytes (a network answer, one line of a stream)
    /// without making a `String` of the whole first; invalid UTF-8 inside a string becomes U+FFFD.
    public static func parse(utf8 bytes: some Collection<UInt8>) throws(JSONError) -> JSONValue {
        var parser = JSONParser(Array(bytes))
        return try parser.parseDocument()
    }

    /// The JSON text: compact (`{"a":[1,2]}`) or indented by two spaces per level.
    ///
    /// Non-ASCII characters are written as they are; quotes, backslashes and control characters
    /// are escaped.
    public func serialized(pretty: Bool = false) -> String {
        var output = ""
        write(to: &output, pretty: pretty, indent: 0)
        return output
    }

    private func write(to output: inout String, pretty: Bool, indent: Int) {
        switch self {
        case .null:
            output += "null"
        case .bool(let b):
            output += b ? "true" : "false"
        case .integer(let i):
            output += String(i)
        case .unsignedInteger(let u):
            output += String(u)
        case .double(let d):
            // Swift's description is the shortest text that reads back to the same double,
            // and it always has a '.' or an exponent, so the number stays a double on re-reading.
            output += d.isFinite ? d.description : "null"
        case .string(let s):
            Self.writeQuoted(s, to: &output)
        case .array(let items):
            guard !items.isEmpty else { output += "[]"; return }
            output += "["
            for (position, item) in items.enumerated() {
                if position > 0 { output += "," }
                if pretty { Self.newline(&output, indent: indent + 1) }
                item.write(to: &output, pretty: pretty, indent: indent + 1)
            }
            if pretty { Self.newline(&output, indent: indent) }
            output += "]"
        case .object(let members):
            guard !members.isEmpty else { output += "{}"; return }
            output += "{"
            for (position, member) in members.enumerated() {
                if position > 0 { output += "," }
                if pretty { Self.newline(&output, indent: indent + 1) }
                Self.writeQuoted(member.key, to: &output)
                output += pretty ? ": " : ":"
                member.value.write(to: &output, pretty: pretty, indent: indent + 1)
            }
            if pretty { Self.newline(&output, indent: indent) }
            output += "}"
        }
    }

    private static func newline(_ output: inout String, indent: Int) {
        output += "\n"
        output += String(repeating: "  ", count: indent)
    }

    private static func writeQuoted(_ string: String, to output: inout String) {
        output += "\""
        // Most strings (names, base64 payloads of megabytes) need no escape: appended whole.
        if !string.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            output += string
            output += "\""
            return
        }
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": output += "\\\""
            case "\\": output += "\\\\"
            case "\n": output += "\\n"
            case "\r": output += "\\r"
            case "\t": output += "\\t"
            case "\u{08}": output += "\\b"
            case "\u{0C}": output += "\\f"
            case "\u{00}"..."\u{1F}", "\u{7F}":
                let hex = String(scalar.value, radix: 16)
                output += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default:
                output.unicodeScalars.append(scalar)
            }
        }
        output += "\""
    }
}

extension JSONValue: CustomStringConvertible {
    /// The compact JSON text.
    public var description: String { serialized() }
}

extension JSONValue: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral,
    ExpressibleByDictionaryLiteral
{
    /// `null`.
    public init(nilLiteral: ()) { self = .null }
    /// A boolean.
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    /// An integer.
    public init(integerLiteral value: Int64) { self = .integer(value) }
    /// A double.
    public init(floatLiteral value: Double) { self = .double(value) }
    /// A string.
    public init(stringLiteral value: String) { self = .string(value) }
    /// An array.
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    /// An object, in the literal's order.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(elements.map { Member($0.0, $0.1) })
    }
}
