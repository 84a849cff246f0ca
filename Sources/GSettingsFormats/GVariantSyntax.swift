/// A parsed GVariant text value before its type is known: GLib's parser reads the text first,
/// then infers a type from every part's pattern (``pattern``), then builds the value.
indirect enum GVariantSyntax {
    case array([GVariantSyntax])
    case tuple([GVariantSyntax])
    case variant(GVariantSyntax)
    /// `{k: v, …}`; `freestanding` is the lone entry `{k, v}`.
    case dictionary(keys: [GVariantSyntax], values: [GVariantSyntax], freestanding: Bool)
    case boolean(Bool)
    case number(String)
    case maybe(GVariantSyntax?)
    case typed(GVariantType, GVariantSyntax)
    case string(String)
    case bytestring([UInt8])

    /// How deep values may nest, as GLib allows.
    static let maximumDepth = 128

    /// Reads one value from `tokens`.
    static func parse(_ tokens: inout GVariantTokens, depth: Int = maximumDepth) throws(GVariantError) -> GVariantSyntax {
        guard depth > 0 else { throw tokens.error("variant nested too deeply") }
        if tokens.peekStarts(with: UInt8(ascii: "[")) {
            tokens.next()
            var items: [GVariantSyntax] = []
            while !tokens.consume("]") {
                if !items.isEmpty { try tokens.require(",", " or ']' to follow an array element") }
                items.append(try parse(&tokens, depth: depth - 1))
            }
            return .array(items)
        }
        if tokens.peekStarts(with: UInt8(ascii: "(")) {
            tokens.next()
            var items: [GVariantSyntax] = []
            while !tokens.consume(")") {
                // A one-element tuple needs its comma: "(1,)".
                if items.count > 1 { try tokens.require(",", " or ')' to follow a tuple element") }
                items.append(try parse(&tokens, depth: depth - 1))
                if items.count == 1 { try tokens.require(",", " after the first tuple element") }
            }
            return .tuple(items)
        }
        if tokens.peekStarts(with: UInt8(ascii: "<")) {
            tokens.next()
            let inner = try parse(&tokens, depth: depth - 1)
            try tokens.require(">", " to follow a variant's value")
            return .variant(inner)
        }
        if tokens.peekStarts(with: UInt8(ascii: "{")) {
            return try parseDictionary(&tokens, depth: depth)
        }
        if tokens.consume("true") { return .boolean(true) }
        if tokens.consume("false") { return .boolean(false) }
        if tokens.isNumeric(), let token = tokens.peek() {
            tokens.next()
            return .number(String(decoding: token, as: UTF8.self))
        }
        if tokens.peekStarts(with: UInt8(ascii: "n")) || tokens.peekStarts(with: UInt8(ascii: "j")) {
            if tokens.consume("just") { return .maybe(try parse(&tokens, depth: depth - 1)) }
            if tokens.consume("nothing") { return .maybe(nil) }
            throw tokens.error("unknown keyword")
        }
        if tokens.peekStarts(with: UInt8(ascii: "@")) || tokens.isKeyword() {
            return try parseTypeDeclaration(&tokens, depth: depth)
        }
        if tokens.peekStarts(with: UInt8(ascii: "'")) || tokens.peekStarts(with: UInt8(ascii: "\"")), let token = tokens.peek() {
            let text = try GVariantEscapes.unescapeString(token)
            tokens.next()
            return .string(text)
        }
        if tokens.peekStarts(with: UInt8(ascii: "b"), UInt8(ascii: "'")) || tokens.peekStarts(with: UInt8(ascii: "b"), UInt8(ascii: "\"")),
           let token = tokens.peek() {
            let bytes = try GVariantEscapes.unescapeBytes(token.dropFirst())
            tokens.next()
            return .bytestring(bytes)
        }
        throw tokens.error("expected a value")
    }

    private static func parseDictionary(_ tokens: inout GVariantTokens, depth: Int) throws(GVariantError) -> GVariantSyntax {
        tokens.next()
        if tokens.consume("}") { return .dictionary(keys: [], values: [], freestanding: false) }
        var keys = [try parse(&tokens, depth: depth - 1)]
        let lone = tokens.consume(",")
        if !lone { try tokens.require(":", " or ',' to follow a dictionary entry's key") }
        var values = [try parse(&tokens, depth: depth - 1)]
        if lone {
            try tokens.require("}", " at the end of a dictionary entry")
            return .dictionary(keys: keys, values: values, freestanding: true)
        }
        while !tokens.consume("}") {
            try tokens.require(",", " or '}' to follow a dictionary entry")
            keys.append(try parse(&tokens, depth: depth - 1))
            try tokens.require(":", " to follow a dictionary entry's key")
            values.append(try parse(&tokens, depth: depth - 1))
        }
        return .dictionary(keys: keys, values: values, freestanding: false)
    }

    private static let keywordTypes: [String: GVariantType] = [
        "boolean": .boolean, "byte": .byte, "int16": .int16, "uint16": .uint16, "int32": .int32, "handle": .handle,
        "uint32": .uint32, "int64": .int64, "uint64": .uint64, "double": .double, "string": .string,
        "objectpath": .objectPath, "signature": .signature,
    ]

    private static func parseTypeDeclaration(_ tokens: inout GVariantTokens, depth: Int) throws(GVariantError) -> GVariantSyntax {
        guard let token = tokens.peek() else { throw tokens.error("expected a value") }
        let word = String(decoding: token, as: UTF8.self)
        let type: GVariantType
        if word.hasPrefix("@") {
            do { type = try GVariantType(parsing: String(word.dropFirst())) } catch {
                throw tokens.error("invalid type declaration: \(error.message)")
            }
        } else if let keyword = keywordTypes[word] {
            type = keyword
        } else {
            throw tokens.error("unknown keyword")
        }
        tokens.next()
        return .typed(type, try parse(&tokens, depth: depth - 1))
    }
}
