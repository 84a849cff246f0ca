/// The tokens of GVariant's text format, split as GLib's parser splits them: a number runs
/// over letters, digits and `-+.`; a word over letters and digits; a string or bytestring to
/// its closing quote; a type declaration (`@a{sv}`) to a separator or an unmatched bracket;
/// anything else is one byte.
struct GVariantTokens {
    private let bytes: [UInt8]
    private var position = 0
    /// The current token's range, once prepared.
    private var current: Range<Int>?

    init(_ text: String) { bytes = Array(text.utf8) }

    /// Where the current (or next) token starts, for error messages.
    var offset: Int { current?.lowerBound ?? position }

    private static func isSpace(_ b: UInt8) -> Bool { b == 0x20 || (b >= 0x09 && b <= 0x0d) }
    static func isAlnum(_ b: UInt8) -> Bool { isAlpha(b) || (b >= 0x30 && b <= 0x39) }
    static func isAlpha(_ b: UInt8) -> Bool { (b | 0x20) >= 0x61 && (b | 0x20) <= 0x7a }

    /// The current token, or nil at the end of the input.
    mutating func peek() -> ArraySlice<UInt8>? {
        if let current { return bytes[current] }
        while position < bytes.count, Self.isSpace(bytes[position]) { position += 1 }
        guard position < bytes.count, bytes[position] != 0 else { return nil }
        let start = position
        var end = start + 1
        let first = bytes[start]
        switch first {
        case UInt8(ascii: "-"), UInt8(ascii: "+"), UInt8(ascii: "."), 0x30...0x39:
            end = start
            while end < bytes.count, Self.isAlnum(bytes[end]) || [UInt8(ascii: "-"), UInt8(ascii: "+"), UInt8(ascii: ".")].contains(bytes[end]) { end += 1 }
        case UInt8(ascii: "b") where start + 1 < bytes.count && (bytes[start + 1] == UInt8(ascii: "'") || bytes[start + 1] == UInt8(ascii: "\"")):
            end = quotedEnd(from: start + 2, quote: bytes[start + 1])
        case UInt8(ascii: "a")...UInt8(ascii: "z"):
            end = start
            while end < bytes.count, Self.isAlnum(bytes[end]) { end += 1 }
        case UInt8(ascii: "'"), UInt8(ascii: "\""):
            end = quotedEnd(from: start + 1, quote: first)
        case UInt8(ascii: "@"), UInt8(ascii: "%"):
            var brackets = 0
            end = start + 1
            scan: while end < bytes.count {
                switch bytes[end] {
                case 0, UInt8(ascii: ","), UInt8(ascii: ":"), UInt8(ascii: ">"), UInt8(ascii: "]"): break scan
                case let b where Self.isSpace(b): break scan
                case UInt8(ascii: "("), UInt8(ascii: "{"): brackets += 1
                case UInt8(ascii: ")"), UInt8(ascii: "}"):
                    if brackets == 0 { break scan }
                    brackets -= 1
                default: break
                }
                end += 1
            }
        default:
            break
        }
        current = start..<end
        position = end
        return bytes[start..<end]
    }

    /// The end of a quoted token starting after its opening quote: past the closing quote, or
    /// the end of the input (an unterminated string, which reading it reports).
    private func quotedEnd(from start: Int, quote: UInt8) -> Int {
        var end = start
        while end < bytes.count {
            let b = bytes[end]
            if b == quote || b == 0 { break }
            if b == UInt8(ascii: "\\") {
                end += 1
                if end >= bytes.count || bytes[end] == 0 { break }
            }
            end += 1
        }
        if end < bytes.count, bytes[end] != 0 { end += 1 }
        return end
    }

    /// Moves past the current token.
    mutating func next() {
        _ = peek()
        current = nil
    }

    /// Whether the current token is exactly `text`; consumes it if so.
    mutating func consume(_ text: String) -> Bool {
        guard let token = peek(), token.elementsEqual(text.utf8) else { return false }
        next()
        return true
    }

    /// Whether the current token starts with `byte`.
    mutating func peekStarts(with byte: UInt8) -> Bool {
        peek()?.first == byte
    }

    /// Whether the current token starts with `first` then `second`.
    mutating func peekStarts(with first: UInt8, _ second: UInt8) -> Bool {
        guard let token = peek(), token.count >= 2 else { return false }
        return token[token.startIndex] == first && token[token.startIndex + 1] == second
    }

    /// Whether the current token is a word of two letters or more (a keyword: `int32`, `just`).
    mutating func isKeyword() -> Bool {
        guard let token = peek(), token.count >= 2 else { return false }
        return Self.isAlpha(token[token.startIndex]) && Self.isAlpha(token[token.startIndex + 1])
    }

    /// Whether the current token is a number (or `inf`/`nan`, which are words).
    mutating func isNumeric() -> Bool {
        guard let token = peek(), let first = token.first else { return false }
        if (first >= 0x30 && first <= 0x39) || first == UInt8(ascii: "-") || first == UInt8(ascii: "+") || first == UInt8(ascii: ".") { return true }
        return token.starts(with: "inf".utf8) || token.starts(with: "nan".utf8)
    }

    /// Consumes `text` or throws "expected TEXT".
    mutating func require(_ text: String, _ context: String) throws(GVariantError) {
        guard consume(text) else { throw error("expected '\(text)'\(context)") }
    }

    /// An error at the current token.
    mutating func error(_ message: String) -> GVariantError {
        let token = peek().map { String(decoding: $0, as: UTF8.self) } ?? "the end"
        return GVariantError("\(message), at offset \(offset) ('\(token)')")
    }

    /// Whether only whitespace is left.
    mutating func atEnd() -> Bool { peek() == nil }
}
