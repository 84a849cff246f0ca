/// A strict RFC 8259 parser over UTF-8 bytes, behind ``JSONValue/parse(_:)`` and
/// ``JSONValue/parse(utf8:)``.
struct JSONParser {
    private let bytes: [UInt8]
    private var index = 0

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// Parses the whole text as one JSON value with optional surrounding whitespace.
    mutating func parseDocument() throws(JSONError) -> JSONValue {
        skipWhitespace()
        let value = try parseValue(depth: 0)
        skipWhitespace()
        guard index == bytes.count else { throw failure("unexpected \(describeCurrent()) after the JSON value") }
        return value
    }

    private var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    private func failure(_ reason: String) -> JSONError {
        JSONError(offset: index, reason: reason)
    }

    private func describeCurrent() -> String {
        guard index < bytes.count else { return "the end of input" }
        let scalar = currentScalar
        if scalar.value < 0x20 || scalar.value == 0x7F {
            return "control character U+" + hex4(scalar.value)
        }
        return "'\(scalar)'"
    }

    private var currentScalar: Unicode.Scalar {
        // 4 bytes hold a whole scalar; invalid UTF-8 decodes as U+FFFD.
        String(decoding: bytes[index...].prefix(4), as: UTF8.self).unicodeScalars.first ?? "\u{FFFD}"
    }

    private func hex4(_ value: UInt32) -> String {
        let hex = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, 4 - hex.count)) + hex
    }

    private mutating func skipWhitespace() {
        while let byte = current, byte == .space || byte == .tab || byte == .lineFeed || byte == .carriageReturn {
            index += 1
        }
    }

    private mutating func expect(_ byte: UInt8, _ what: String) throws(JSONError) {
        guard current == byte else { throw failure("expected \(what), found \(describeCurrent())") }
        index += 1
    }

    private mutating func parseValue(depth: Int) throws(JSONError) -> JSONValue {
        guard let byte = current else { throw failure("expected a JSON value, found the end of input") }
        switch byte {
        case .openBrace: return try parseObject(depth: depth + 1)
        case .openBracket: return try parseArray(depth: depth + 1)
        case .quote: return .string(try parseString())
        case UInt8(ascii: "t"): return try parseLiteral("true", .bool(true))
        case UInt8(ascii: "f"): return try parseLiteral("false", .bool(false))
        case UInt8(ascii: "n"): return try parseLiteral("null", .null)
        case .minus, .zero ... .nine: return try parseNumber()
        default: throw failure("expected a JSON value, found \(describeCurrent())")
        }
    }

    private mutating func parseLiteral(_ word: String, _ value: JSONValue) throws(JSONError) -> JSONValue {
        let expected = Array(word.utf8)
        guard bytes.count - index >= expected.count, Array(bytes[index ..< index + expected.count]) == expected else {
            throw failure("expected a JSON value, found \(describeCurrent())")
        }
        index += expected.count
        return value
    }

    private mutating func parseArray(depth: Int) throws(JSONError) -> JSONValue {
        guard depth <= JSONValue.maximumDepth else { throw failure("arrays and objects nested deeper than \(JSONValue.maximumDepth)") }
        index += 1
        skipWhitespace()
        var items: [JSONValue] = []
        if current == .closeBracket {
            index += 1
            return .array(items)
        }
        while true {
            skipWhitespace()
            items.append(try parseValue(depth: depth))
            skipWhitespace()
            guard let byte = current else { throw failure("expected ',' or ']', found the end of input") }
            index += 1
            if byte == .closeBracket { return .array(items) }
            guard byte == .comma else {
                index -= 1
                throw failure("expected ',' or ']', found \(describeCurrent())")
            }
        }
    }

    private mutating func parseObject(depth: Int) throws(JSONError) -> JSONValue {
        guard depth <= JSONValue.maximumDepth else { throw failure("arrays and objects nested deeper than \(JSONValue.maximumDepth)") }
        index += 1
        skipWhitespace()
        var members: [JSONValue.Member] = []
        if current == .closeBrace {
            index += 1
            return .object(members)
        }
        while true {
            skipWhitespace()
            guard current == .quote else { throw failure("expected a quoted member name, found \(describeCurrent())") }
            let key = try parseString()
            skipWhitespace()
            try expect(.colon, "':' after a member name")
            skipWhitespace()
            members.append(JSONValue.Member(key, try parseValue(depth: depth)))
            skipWhitespace()
            guard let byte = current else { throw failure("expected ',' or '}', found the end of input") }
            index += 1
            if byte == .closeBrace { return .object(members) }
            guard byte == .comma else {
                index -= 1
                throw failure("expected ',' or '}', found \(describeCurrent())")
            }
        }
    }

    private mutating func parseNumber() throws(JSONError) -> JSONValue {
        let start = index
        var isInteger = true
        if current == .minus { index += 1 }
        guard let first = current, first.isDigit else { throw failure("expected a digit, found \(describeCurrent())") }
        index += 1
        if first == .zero, let next = current, next.isDigit {
            throw failure("numbers may not have leading zeros")
        }
        skipDigits()
        if current == .period {
            isInteger = false
            index += 1
            guard let next = current, next.isDigit else { throw failure("expected a digit after '.', found \(describeCurrent())") }
            skipDigits()
        }
        if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if current == .plus || current == .minus { index += 1 }
            guard let next = current, next.isDigit else { throw failure("expected a digit in the exponent, found \(describeCurrent())") }
            skipDigits()
        }
        let text = String(decoding: bytes[start ..< index], as: UTF8.self)
        if isInteger {
            if let signed = Int64(text) { return .integer(signed) }
            if let unsigned = UInt64(text) { return .unsignedInteger(unsigned) }
        }
        guard let double = Double(text), double.isFinite else {
            index = start
            throw failure("number \(text) is too large")
        }
        return .double(double)
    }

    private mutating func skipDigits() {
        while let byte = current, byte.isDigit { index += 1 }
    }

    private mutating func parseString() throws(JSONError) -> String {
        index += 1
        var output: [UInt8] = []
        var runStart = index
        while true {
            index = endOfPlainRun(from: index)
            guard let byte = current else { throw failure("unterminated string") }
            switch byte {
            case .quote:
                defer { index += 1 }
                // Without escapes the text is decoded straight from the input, not copied first.
                if output.isEmpty { return String(decoding: bytes[runStart ..< index], as: UTF8.self) }
                output += bytes[runStart ..< index]
                return String(decoding: output, as: UTF8.self)
            case .backslash:
                output += bytes[runStart ..< index]
                try parseEscape(into: &output)
                runStart = index
            default:
                throw failure("\(describeCurrent()) must be escaped in a string")
            }
        }
    }

    /// Where the run of bytes from `start` that a string holds as they are ends: at a quote, a
    /// backslash, a control character or the end. One tight loop, as a value can be megabytes
    /// of base64.
    private func endOfPlainRun(from start: Int) -> Int {
        bytes.withUnsafeBufferPointer { buffer in
            var position = start
            while position < buffer.count {
                let byte = buffer[position]
                if byte == .quote || byte == .backslash || byte < 0x20 { break }
                position += 1
            }
            return position
        }
    }

    private mutating func parseEscape(into output: inout [UInt8]) throws(JSONError) {
        index += 1
        guard let byte = current else { throw failure("unterminated string") }
        index += 1
        switch byte {
        case .quote, .backslash, .slash: output.append(byte)
        case UInt8(ascii: "b"): output.append(0x08)
        case UInt8(ascii: "f"): output.append(0x0C)
        case UInt8(ascii: "n"): output.append(.lineFeed)
        case UInt8(ascii: "r"): output.append(.carriageReturn)
        case UInt8(ascii: "t"): output.append(.tab)
        case UInt8(ascii: "u"):
            var value = try parseHex4()
            if (0xD800 ... 0xDBFF).contains(value) {
                // UTF-16 surrogate pairs arrive as two escapes; a lone half is not a character.
                guard current == .backslash, index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "u") else {
                    throw failure("unpaired surrogate \\u\(hex4(value)) in a string")
                }
                index += 2
                let low = try parseHex4()
                guard (0xDC00 ... 0xDFFF).contains(low) else {
                    throw failure("unpaired surrogate \\u\(hex4(value)) in a string")
                }
                value = 0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00)
            } else if (0xDC00 ... 0xDFFF).contains(value) {
                throw failure("unpaired surrogate \\u\(hex4(value)) in a string")
            }
            guard let scalar = Unicode.Scalar(value) else { throw failure("invalid unicode escape") }
            UTF8.encode(scalar) { output.append($0) }
        default:
            index -= 1
            throw failure("invalid escape '\\\(currentScalar)' in a string")
        }
    }

    private mutating func parseHex4() throws(JSONError) -> UInt32 {
        var value: UInt32 = 0
        for _ in 0 ..< 4 {
            guard let byte = current, let digit = byte.hexDigitValue else {
                throw failure("expected 4 hex digits after \\u, found \(describeCurrent())")
            }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }
}

/// JSON text that could not be parsed.
public struct JSONError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The byte offset into the UTF-8 text where parsing stopped.
    public var offset: Int
    /// What was wrong there.
    public var reason: String

    /// Creates an error at `offset`.
    public init(offset: Int, reason: String) {
        self.offset = offset
        self.reason = reason
    }

    /// "invalid JSON at byte N: reason".
    public var description: String { "invalid JSON at byte \(offset): \(reason)" }
}

extension UInt8 {
    fileprivate static let tab = UInt8(ascii: "\t")
    fileprivate static let lineFeed = UInt8(ascii: "\n")
    fileprivate static let carriageReturn = UInt8(ascii: "\r")
    fileprivate static let space = UInt8(ascii: " ")
    fileprivate static let quote = UInt8(ascii: "\"")
    fileprivate static let plus = UInt8(ascii: "+")
    fileprivate static let comma = UInt8(ascii: ",")
    fileprivate static let minus = UInt8(ascii: "-")
    fileprivate static let period = UInt8(ascii: ".")
    fileprivate static let slash = UInt8(ascii: "/")
    fileprivate static let zero = UInt8(ascii: "0")
    fileprivate static let nine = UInt8(ascii: "9")
    fileprivate static let colon = UInt8(ascii: ":")
    fileprivate static let openBracket = UInt8(ascii: "[")
    fileprivate static let backslash = UInt8(ascii: "\\")
    fileprivate static let closeBracket = UInt8(ascii: "]")
    fileprivate static let openBrace = UInt8(ascii: "{")
    fileprivate static let closeBrace = UInt8(ascii: "}")

    fileprivate var isDigit: Bool { self >= .zero && self <= .nine }

    fileprivate var hexDigitValue: UInt8? {
        switch self {
        case .zero ... .nine: self - .zero
        case UInt8(ascii: "a") ... UInt8(ascii: "f"): self - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A") ... UInt8(ascii: "F"): self - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
