/// A token of the expression language, with the 1-based column (in Unicode scalars) where it
/// starts.
struct ExpressionToken: Sendable {
    enum Kind: Equatable, Sendable {
        /// Decimal digits, kept as text so that `-9223372036854775808` can be folded.
        case integer(String)
        case number(Double, text: String)
        case string(String)
        /// `value`, `true`, `false`, a function name, a key, or an unknown name.
        case word(String)
        case symbol(String)
        case end
    }

    var kind: Kind
    var column: Int

    /// The token as "found …" names it.
    var found: String {
        switch kind {
        case .integer(let digits): "number \(digits)"
        case .number(_, let text): "number \(text)"
        case .string(let s): "string \"\(ExpressionLexer.abbreviated(s))\""
        case .word(let w): "'\(ExpressionLexer.abbreviated(w))'"
        case .symbol(let s): "'\(s)'"
        case .end: "end of input"
        }
    }

    func isSymbol(_ text: String) -> Bool { kind == .symbol(text) }
}

/// Splits expression text into tokens, one at a time.
struct ExpressionLexer {
    private let scalars: [Unicode.Scalar]
    private var index = 0

    init(_ text: String) {
        scalars = Array(text.unicodeScalars)
    }

    /// The 1-based column just past the last scalar.
    var endColumn: Int { scalars.count + 1 }

    static func abbreviated(_ text: String) -> String {
        let escaped = text.unicodeScalars.map { $0.escaped(asASCII: false) }.joined()
        return escaped.count > 40 ? String(escaped.prefix(40)) + "…" : escaped
    }

    private static let symbols: [String] = ["||", "&&", "==", "!=", "<=", ">=", "<", ">", "!", "+", "-", "*", "/", "%", "?", ":", "(", ")", ","]

    private static func isWordScalar(_ s: Unicode.Scalar) -> Bool {
        s.isASCII && (s.properties.isAlphabetic || ("0"..."9").contains(s) || s == "_" || s == ".")
    }

    private static func isDigit(_ s: Unicode.Scalar) -> Bool { ("0"..."9").contains(s) }

    private func peek(_ offset: Int = 0) -> Unicode.Scalar? {
        index + offset < scalars.count ? scalars[index + offset] : nil
    }

    private func fail(_ column: Int, _ message: String) -> PropBusError {
        PropBusError(.invalidExpression, "column \(column): \(message)")
    }

    /// The next token; `.end` once the text is used up.
    mutating func next() throws(PropBusError) -> ExpressionToken {
        while let s = peek(), s == " " || s == "\t" || s == "\n" || s == "\r" { index += 1 }
        let column = index + 1
        guard let first = peek() else { return ExpressionToken(kind: .end, column: column) }
        if first == "\"" || first == "'" { return ExpressionToken(kind: .string(try string()), column: column) }
        if Self.isDigit(first) { return ExpressionToken(kind: try number(), column: column) }
        if Self.isWordScalar(first) && first != "." { return ExpressionToken(kind: .word(try word()), column: column) }
        for symbol in Self.symbols where symbol.unicodeScalars.elementsEqual(scalars[index..<min(scalars.count, index + symbol.unicodeScalars.count)]) {
            index += symbol.unicodeScalars.count
            return ExpressionToken(kind: .symbol(symbol), column: column)
        }
        switch first {
        case "=": throw fail(column, "expected '==', found '='")
        case "&": throw fail(column, "expected '&&', found '&'")
        case "|": throw fail(column, "expected '||', found '|'")
        default: throw fail(column, "unexpected character '\(first.escaped(asASCII: false))'")
        }
    }

    /// The run of word scalars starting at the current index, without consuming it.
    private func wordRun() -> String {
        var end = index
        while end < scalars.count && Self.isWordScalar(scalars[end]) { end += 1 }
        var run = String.UnicodeScalarView()
        run.append(contentsOf: scalars[index..<end])
        return String(run)
    }

    /// A name, a key (validated by ``Key``'s rule), or a keyword.
    private mutating func word() throws(PropBusError) -> String {
        let column = index + 1
        let run = wordRun()
        index += run.unicodeScalars.count
        if run.contains(".") {
            do throws(PropBusError) {
                _ = try Key(run)
            } catch {
                throw fail(column, error.message)
            }
        }
        return run
    }

    /// A number, or a key whose group starts with a digit (`1a.b`, `3.x`).
    private mutating func number() throws(PropBusError) -> ExpressionToken.Kind {
        let start = index
        let run = wordRun()
        // A key's name starts with a letter or '_', so no number is ever a valid key.
        if run.contains("."), (try? Key(run)) != nil {
            index += run.unicodeScalars.count
            return .word(run)
        }
        var isInteger = true
        while let s = peek(), Self.isDigit(s) { index += 1 }
        if peek() == ".", let after = peek(1), Self.isDigit(after) {
            isInteger = false
            index += 1
            while let s = peek(), Self.isDigit(s) { index += 1 }
        }
        if let e = peek(), e == "e" || e == "E" {
            var offset = 1
            if let sign = peek(1), sign == "+" || sign == "-" { offset = 2 }
            if let digit = peek(offset), Self.isDigit(digit) {
                isInteger = false
                index += offset
                while let s = peek(), Self.isDigit(s) { index += 1 }
            }
        }
        var text = String.UnicodeScalarView()
        text.append(contentsOf: scalars[start..<index])
        let literal = String(text)
        if let s = peek(), Self.isWordScalar(s) {
            index += wordRun().unicodeScalars.count
            var whole = String.UnicodeScalarView()
            whole.append(contentsOf: scalars[start..<index])
            throw fail(start + 1, "malformed number '\(Self.abbreviated(String(whole)))'")
        }
        if isInteger { return .integer(literal) }
        guard let value = Double(literal), value.isFinite else {
            throw fail(start + 1, "number \(literal) is out of range")
        }
        return .number(value, text: literal)
    }

    /// A string literal in either quote, with its escapes resolved.
    private mutating func string() throws(PropBusError) -> String {
        let column = index + 1
        let quote = scalars[index]
        index += 1
        var result = String.UnicodeScalarView()
        while true {
            guard let s = peek() else {
                throw fail(endColumn, "expected \(quote) to close the string started at column \(column), found end of input")
            }
            index += 1
            if s == quote { return String(result) }
            guard s == "\\" else {
                result.append(s)
                continue
            }
            let escapeColumn = index
            guard let escape = peek() else {
                throw fail(endColumn, "expected an escape after '\\' at column \(escapeColumn), found end of input")
            }
            index += 1
            switch escape {
            case "\"", "'", "\\": result.append(escape)
            case "n": result.append("\n")
            case "t": result.append("\t")
            case "r": result.append("\r")
            case "u":
                var code: UInt32 = 0
                for _ in 0..<4 {
                    guard let h = peek(), h.isASCII, let digit = UInt32(String(h), radix: 16) else {
                        throw fail(escapeColumn, "expected 4 hex digits after '\\u', found \(peek().map { "'\($0.escaped(asASCII: false))'" } ?? "end of input")")
                    }
                    code = code * 16 + digit
                    index += 1
                }
                guard let scalar = Unicode.Scalar(code) else {
                    throw fail(escapeColumn, "\\u\(String(code, radix: 16, uppercase: true)) is not a Unicode scalar value (a surrogate)")
                }
                result.append(scalar)
            default:
                throw fail(escapeColumn, "unknown escape '\\\(escape.escaped(asASCII: false))'; the escapes are \\\" \\' \\\\ \\n \\t \\r \\uXXXX")
            }
        }
    }
}
