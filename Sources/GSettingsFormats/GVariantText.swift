/// GVariant's text format (`['a', 'b']`, `@ms nothing`, `uint32 5`, `<(1, 'x')>`), read as
/// `g_variant_parse` reads it and written as `g_variant_print` writes it: what `dconf dump`
/// prints and `dconf load`, `gsettings set`, schema defaults and override files read.
public enum GVariantText {
    /// Reads one value. Without `type` the text must say it (numbers are `i` or `d`, strings
    /// `s`, unless annotated, as in `dconf load`); with `type` it is read as that type (as
    /// schema defaults and override files are), a plain value standing for `just` it.
    public static func parse(_ text: String, as type: GVariantType? = nil) throws(GVariantError) -> GVariantValue {
        var tokens = GVariantTokens(text)
        let syntax = try GVariantSyntax.parse(&tokens)
        guard tokens.atEnd() else { throw tokens.error("expected the end of the input") }
        if let type { return try value(of: syntax, as: type) }
        return try value(of: syntax, as: GVariantPattern.resolve(GVariantPattern.of(syntax)))
    }

    /// The value `syntax` stands for as `type`.
    private static func value(of syntax: GVariantSyntax, as type: GVariantType) throws(GVariantError) -> GVariantValue {
        switch syntax {
        case .maybe(let child):
            guard case .maybe(let element) = type else { throw mismatch(type) }
            return .maybe(element: element, try child.map { c throws(GVariantError) in try value(of: c, as: element) })
        case .typed(_, let child):
            return try value(of: child, as: type)
        default:
            // Every other value may stand for `just` itself where a maybe is expected.
            if case .maybe(let element) = type {
                return .maybe(element: element, try value(of: syntax, as: element))
            }
            return try baseValue(of: syntax, as: type)
        }
    }

    private static func mismatch(_ type: GVariantType) -> GVariantError {
        GVariantError("can not parse as value of type '\(type)'")
    }

    private static func baseValue(of syntax: GVariantSyntax, as type: GVariantType) throws(GVariantError) -> GVariantValue {
        switch (syntax, type) {
        case (.array(let items), .array(let element)):
            var values: [GVariantValue] = []
            for item in items { values.append(try value(of: item, as: element)) }
            return .array(element: element, values)
        case (.tuple(let items), .tuple(let types)) where items.count == types.count:
            var values: [GVariantValue] = []
            for (item, itemType) in zip(items, types) { values.append(try value(of: item, as: itemType)) }
            return .tuple(values)
        case (.variant(let inner), .variant):
            return .variant(try value(of: inner, as: GVariantPattern.resolve(GVariantPattern.of(inner))))
        case (.dictionary(let keys, let values, true), .dictEntry(let keyType, let valueType)):
            return .dictEntry(try value(of: keys[0], as: keyType), try value(of: values[0], as: valueType))
        case (.dictionary(let keys, let values, false), .array(.dictEntry(let keyType, let valueType))):
            var entries: [GVariantValue] = []
            for (key, entryValue) in zip(keys, values) {
                entries.append(.dictEntry(try value(of: key, as: keyType), try value(of: entryValue, as: valueType)))
            }
            return .array(element: .dictEntry(keyType, valueType), entries)
        case (.boolean(let b), .boolean):
            return .boolean(b)
        case (.number(let token), _):
            return try GVariantNumbers.value(token, as: type)
        case (.string(let text), .string):
            return .string(text)
        case (.string(let text), .objectPath):
            guard ObjectPathRule.isValid(text) else { throw GVariantError("'\(text)' is not a valid object path") }
            return .objectPath(text)
        case (.string(let text), .signature):
            return .signature(text)
        case (.bytestring(let bytes), .array(.byte)):
            return .array(element: .byte, bytes.map { .byte($0) })
        default:
            throw mismatch(type)
        }
    }

    /// The text `g_variant_print` gives: with `annotate`, a type annotation wherever the text
    /// alone would not say the type (so reading it back gives the same type), as dconf dumps.
    public static func print(_ value: GVariantValue, annotate: Bool = true) -> String {
        var out = ""
        write(value, annotate: annotate, to: &out)
        return out
    }

    private static func write(_ value: GVariantValue, annotate: Bool, to out: inout String) {
        switch value {
        case .maybe(let element, let inner):
            if annotate { out += "@m\(element) " }
            writeMaybe(inner, to: &out)
        case .array(.byte, let items):
            let bytes = items.map { item -> UInt8 in if case .byte(let b) = item { b } else { 0 } }
            if let text = GVariantEscapes.quoteBytestring(bytes) {
                out += text
            } else {
                writeArray(value.type, items, annotate: annotate, to: &out)
            }
        case .array(_, let items):
            writeArray(value.type, items, annotate: annotate, to: &out)
        case .tuple(let items):
            out += "("
            for (index, item) in items.enumerated() {
                write(item, annotate: annotate, to: &out)
                if index < items.count - 1 || items.count == 1 { out += index < items.count - 1 ? ", " : "," }
            }
            out += ")"
        case .dictEntry(let key, let entryValue):
            out += "{"
            write(key, annotate: annotate, to: &out)
            out += ", "
            write(entryValue, annotate: annotate, to: &out)
            out += "}"
        case .variant(let inner):
            // Nested variants always say their type: it varies by nature.
            out += "<"
            write(inner, annotate: true, to: &out)
            out += ">"
        case .boolean(let b): out += b ? "true" : "false"
        case .string(let text): out += GVariantEscapes.quote(text)
        case .byte(let y): out += (annotate ? "byte " : "") + "0x" + String(y, radix: 16).leftPadded(to: 2)
        case .int16(let n): out += (annotate ? "int16 " : "") + String(n)
        case .uint16(let q): out += (annotate ? "uint16 " : "") + String(q)
        case .int32(let i): out += String(i)
        case .handle(let h): out += (annotate ? "handle " : "") + String(h)
        case .uint32(let u): out += (annotate ? "uint32 " : "") + String(u)
        case .int64(let x): out += (annotate ? "int64 " : "") + String(x)
        case .uint64(let t): out += (annotate ? "uint64 " : "") + String(t)
        case .double(let d): out += GVariantNumbers.text(of: d)
        case .objectPath(let o): out += (annotate ? "objectpath " : "") + "'\(o)'"
        case .signature(let g): out += (annotate ? "signature " : "") + "'\(g)'"
        }
    }

    /// `nothing`, `just nothing`…, or the innermost value alone when no level is `nothing`.
    private static func writeMaybe(_ inner: GVariantValue?, to out: inout String) {
        var levels = 1
        var current = inner
        while case .maybe(_, let deeper)? = current {
            levels += 1
            current = deeper
        }
        if let current {
            write(current, annotate: false, to: &out)
        } else {
            out += String(repeating: "just ", count: levels - 1) + "nothing"
        }
    }

    private static func writeArray(_ type: GVariantType, _ items: [GVariantValue], annotate: Bool, to out: inout String) {
        let dictionary: Bool
        if case .array(.dictEntry) = type { dictionary = true } else { dictionary = false }
        guard !items.isEmpty else {
            out += (annotate ? "@\(type) " : "") + (dictionary ? "{}" : "[]")
            return
        }
        out += dictionary ? "{" : "["
        var annotateNext = annotate
        for (index, item) in items.enumerated() {
            if index > 0 { out += ", " }
            if dictionary, case .dictEntry(let key, let entryValue) = item {
                write(key, annotate: annotateNext, to: &out)
                out += ": "
                write(entryValue, annotate: annotateNext, to: &out)
            } else {
                write(item, annotate: annotateNext, to: &out)
            }
            // The first element's annotation says the type of them all.
            annotateNext = false
        }
        out += dictionary ? "}" : "]"
    }
}

/// D-Bus's object path rule: `/`, or `/`-separated non-empty elements of `[A-Za-z0-9_]`.
enum ObjectPathRule {
    static func isValid(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.first == UInt8(ascii: "/") else { return false }
        if bytes.count == 1 { return true }
        guard bytes.last != UInt8(ascii: "/") else { return false }
        var previousSlash = true
        for byte in bytes.dropFirst() {
            if byte == UInt8(ascii: "/") {
                if previousSlash { return false }
                previousSlash = true
            } else {
                guard GVariantTokens.isAlnum(byte) || byte == UInt8(ascii: "_") else { return false }
                previousSlash = false
            }
        }
        return true
    }
}
