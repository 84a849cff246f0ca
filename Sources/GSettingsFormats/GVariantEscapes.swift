/// Quoted strings and bytestrings of GVariant's text format, read and written as GLib does.
enum GVariantEscapes {
    /// The text of a quoted string token (`'…'` or `"…"`, quotes included): `\u`/`\U` escapes,
    /// C's one-letter escapes, a backslash-newline dropped, any other escaped character itself.
    static func unescapeString(_ token: ArraySlice<UInt8>) throws(GVariantError) -> String {
        let bytes = try unescape(token) { (escaped, token, i, end, out) throws(GVariantError) -> Bool in
            guard escaped == UInt8(ascii: "u") || escaped == UInt8(ascii: "U") else { return false }
            let length = escaped == UInt8(ascii: "u") ? 4 : 8
            let digits = token[(i + 1)..<min(i + 1 + length, end)]
            guard digits.count == length, let value = UInt32(String(decoding: digits, as: UTF8.self), radix: 16), value != 0,
                  let scalar = Unicode.Scalar(value) else {
                throw GVariantError("invalid \(length)-character unicode escape")
            }
            out.append(contentsOf: Array(String(Character(scalar)).utf8))
            i += 1 + length
            return true
        }
        guard let text = String(validating: bytes, as: UTF8.self) else { throw GVariantError("a string is not valid UTF-8") }
        return text
    }

    /// The bytes of a bytestring token without its `b` (`'…'` or `"…"`): octal escapes of up
    /// to three digits, C's one-letter escapes; a terminating NUL added, as GLib's
    /// `g_variant_new_bytestring` does (and a NUL inside ends it, as there).
    static func unescapeBytes(_ token: ArraySlice<UInt8>) throws(GVariantError) -> [UInt8] {
        var out = try unescape(token) { (escaped, token, i, end, out) throws(GVariantError) -> Bool in
            guard escaped >= 0x30 && escaped <= 0x37 else { return false }
            var value = escaped - 0x30
            i += 1
            for _ in 0..<2 where i < end && token[i] >= 0x30 && token[i] <= 0x37 {
                value = value &<< 3 | (token[i] - 0x30)
                i += 1
            }
            out.append(value)
            return true
        }
        if let nul = out.firstIndex(of: 0) { out.removeSubrange(nul...) }
        return out + [0]
    }

    /// The bytes between a token's quotes with escapes read: `special` reads the escapes of one
    /// kind of token (given the escaped byte, the token, the index of that byte — which it moves
    /// past what it read — the end, and the output; false: not one of its escapes), then C's
    /// one-letter escapes; a backslash-newline is dropped, any other escaped byte is itself.
    private static func unescape(
        _ token: ArraySlice<UInt8>,
        special: (UInt8, ArraySlice<UInt8>, inout Int, Int, inout [UInt8]) throws(GVariantError) -> Bool
    ) throws(GVariantError) -> [UInt8] {
        guard let quote = token.first, token.count >= 2, token.last == quote else {
            throw GVariantError("unterminated string constant")
        }
        var out: [UInt8] = []
        var i = token.startIndex + 1
        let end = token.endIndex - 1
        while i < end {
            let byte = token[i]
            guard byte == UInt8(ascii: "\\") else {
                out.append(byte)
                i += 1
                continue
            }
            i += 1
            guard i < end else { throw GVariantError("unterminated string constant") }
            let escaped = token[i]
            if try special(escaped, token, &i, end, &out) { continue }
            if let control = controlEscapes[escaped] {
                out.append(control)
            } else if escaped != UInt8(ascii: "\n") {
                out.append(escaped)
            }
            i += 1
        }
        return out
    }

    private static let controlEscapes: [UInt8: UInt8] = [
        UInt8(ascii: "a"): 0x07, UInt8(ascii: "b"): 0x08, UInt8(ascii: "f"): 0x0c, UInt8(ascii: "n"): 0x0a,
        UInt8(ascii: "r"): 0x0d, UInt8(ascii: "t"): 0x09, UInt8(ascii: "v"): 0x0b,
    ]

    /// A string quoted as GLib prints it: single quotes unless it holds one; the quote and
    /// backslash escaped; characters that do not print as C escapes or `\uXXXX`/`\UXXXXXXXX`.
    static func quote(_ text: String) -> String {
        let quote: Character = text.contains("'") ? "\"" : "'"
        var out = String(quote)
        for scalar in text.unicodeScalars {
            if Character(scalar) == quote || scalar == "\\" { out.append("\\") }
            if isPrintable(scalar) {
                out.unicodeScalars.append(scalar)
            } else if let letter = controlLetters[scalar.value] {
                out.append("\\" + letter)
            } else if scalar.value < 0x10000 {
                out.append("\\u" + hex(scalar.value, width: 4))
            } else {
                out.append("\\U" + hex(scalar.value, width: 8))
            }
        }
        out.append(quote)
        return out
    }

    /// `b'…'` for bytes whose only NUL is the last, as GLib prints a bytestring; nil otherwise.
    static func quoteBytestring(_ bytes: [UInt8]) -> String? {
        guard bytes.last == 0, bytes.firstIndex(of: 0) == bytes.count - 1 else { return nil }
        let body = bytes.dropLast()
        let quote = body.contains(UInt8(ascii: "'")) ? "\"" : "'"
        var out = "b" + quote
        for byte in body {
            switch byte {
            case 0x08: out += "\\b"
            case 0x0c: out += "\\f"
            case 0x0a: out += "\\n"
            case 0x0d: out += "\\r"
            case 0x09: out += "\\t"
            case 0x0b: out += "\\v"
            case UInt8(ascii: "\\"): out += "\\\\"
            case UInt8(ascii: "\""): out += "\\\""
            case 0x20..<0x7f: out.unicodeScalars.append(Unicode.Scalar(byte))
            default: out += "\\" + String(byte, radix: 8).leftPadded(to: 3)
            }
        }
        return out + quote
    }

    private static let controlLetters: [UInt32: String] = [0x07: "a", 0x08: "b", 0x0c: "f", 0x0a: "n", 0x0d: "r", 0x09: "t", 0x0b: "v"]

    private static func isPrintable(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .control, .format, .unassigned, .privateUse, .surrogate, .lineSeparator, .paragraphSeparator: false
        default: true
        }
    }

    private static func hex(_ value: UInt32, width: Int) -> String {
        String(value, radix: 16).leftPadded(to: width)
    }
}

extension String {
    /// The string with leading zeros up to `width` characters.
    func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
