/// The XML that `.gschema.xml` files are written in, read into elements: tags, attributes,
/// text with the five named entities and character references, CDATA, comments, processing
/// instructions and a DOCTYPE (skipped). No namespaces, no external entities.
public struct XMLElement: Sendable {
    public var name: String
    public var attributes: [String: String]
    public var children: [XMLElement]
    /// The element's own text, its children's left out.
    public var text: String
    /// The line the element starts on, for error messages.
    public var line: Int

    /// The children named `name`.
    public func children(named name: String) -> [XMLElement] { children.filter { $0.name == name } }
    /// The first child named `name`.
    public func child(named name: String) -> XMLElement? { children.first { $0.name == name } }

    /// Reads the document's root element.
    public static func parse(_ text: String, source: String) throws(GVariantError) -> XMLElement {
        var reader = XMLReader(bytes: Array(text.utf8), source: source)
        return try reader.document()
    }
}

private struct XMLReader {
    let bytes: [UInt8]
    let source: String
    var index = 0
    /// The offsets of the newlines, to say an offset's line.
    private let newlines: [Int]

    init(bytes: [UInt8], source: String) {
        self.bytes = bytes
        self.source = source
        newlines = bytes.indices.filter { bytes[$0] == 0x0a }
    }

    private var line: Int {
        var low = 0, high = newlines.count
        while low < high {
            let middle = (low + high) / 2
            if newlines[middle] < index { low = middle + 1 } else { high = middle }
        }
        return low + 1
    }

    private func fail(_ message: String) -> GVariantError { GVariantError("\(source):\(line): \(message)") }

    private func starts(with text: String) -> Bool {
        let utf8 = Array(text.utf8)
        return index + utf8.count <= bytes.count && Array(bytes[index..<(index + utf8.count)]) == utf8
    }

    private mutating func skip(past text: String) throws(GVariantError) {
        let utf8 = Array(text.utf8)
        while index + utf8.count <= bytes.count {
            if Array(bytes[index..<(index + utf8.count)]) == utf8 { index += utf8.count; return }
            index += 1
        }
        throw fail("expected '\(text)' before the end of the file")
    }

    private mutating func skipSpace() {
        while index < bytes.count, [0x20, 0x09, 0x0a, 0x0d].contains(bytes[index]) { index += 1 }
    }

    /// Comments, processing instructions and a DOCTYPE between elements.
    private mutating func skipMisc() throws(GVariantError) {
        while true {
            skipSpace()
            if starts(with: "<!--") { try skip(past: "-->") } else if starts(with: "<?") { try skip(past: "?>") } else if starts(with: "<!DOCTYPE") {
                var depth = 0
                while index < bytes.count {
                    let b = bytes[index]
                    index += 1
                    if b == UInt8(ascii: "[") { depth += 1 } else if b == UInt8(ascii: "]") { depth -= 1 } else if b == UInt8(ascii: ">"), depth == 0 { break }
                }
            } else { return }
        }
    }

    mutating func document() throws(GVariantError) -> XMLElement {
        try skipMisc()
        guard starts(with: "<") else { throw fail("expected the root element") }
        let root = try element()
        try skipMisc()
        guard index >= bytes.count else { throw fail("content after the root element") }
        return root
    }

    private mutating func name() throws(GVariantError) -> String {
        let start = index
        while index < bytes.count, !([0x20, 0x09, 0x0a, 0x0d, UInt8(ascii: ">"), UInt8(ascii: "/"), UInt8(ascii: "=")].contains(bytes[index])) { index += 1 }
        guard index > start else { throw fail("expected a name") }
        return String(decoding: bytes[start..<index], as: UTF8.self)
    }

    private mutating func element() throws(GVariantError) -> XMLElement {
        let startLine = line
        index += 1  // <
        var element = XMLElement(name: try name(), attributes: [:], children: [], text: "", line: startLine)
        while true {
            skipSpace()
            guard index < bytes.count else { throw fail("unterminated tag <\(element.name)>") }
            if starts(with: "/>") { index += 2; return element }
            if bytes[index] == UInt8(ascii: ">") { index += 1; break }
            let attribute = try name()
            skipSpace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "=") else { throw fail("expected '=' after attribute \(attribute)") }
            index += 1
            skipSpace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") || bytes[index] == UInt8(ascii: "'") else {
                throw fail("expected a quoted value for attribute \(attribute)")
            }
            let quote = bytes[index]
            index += 1
            let start = index
            while index < bytes.count, bytes[index] != quote { index += 1 }
            guard index < bytes.count else { throw fail("unterminated value of attribute \(attribute)") }
            element.attributes[attribute] = try decodeEntities(bytes[start..<index])
            index += 1
        }
        var text: [UInt8] = []
        while true {
            guard index < bytes.count else { throw fail("<\(element.name)> is never closed") }
            if starts(with: "</") {
                index += 2
                let closing = try name()
                guard closing == element.name else { throw fail("</\(closing)> closes <\(element.name)>") }
                skipSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ">") else { throw fail("expected '>'") }
                index += 1
                element.text = try decodeEntities(text[...])
                return element
            } else if starts(with: "<!--") {
                try skip(past: "-->")
            } else if starts(with: "<![CDATA[") {
                index += 9
                let start = index
                try skip(past: "]]>")
                text += escapeAmpersands(bytes[start..<(index - 3)])
            } else if starts(with: "<?") {
                try skip(past: "?>")
            } else if bytes[index] == UInt8(ascii: "<") {
                element.children.append(try self.element())
            } else {
                text.append(bytes[index])
                index += 1
            }
        }
    }

    /// CDATA is taken literally: its `&` must survive ``decodeEntities(_:)``.
    private func escapeAmpersands(_ raw: ArraySlice<UInt8>) -> [UInt8] {
        raw.flatMap { $0 == UInt8(ascii: "&") ? Array("&amp;".utf8) : [$0] }
    }

    private func decodeEntities(_ raw: ArraySlice<UInt8>) throws(GVariantError) -> String {
        let text = String(decoding: raw, as: UTF8.self)
        guard text.contains("&") else { return text }
        var out = ""
        var rest = Substring(text)
        while let amp = rest.firstIndex(of: "&") {
            out += rest[..<amp]
            guard let semicolon = rest[amp...].firstIndex(of: ";") else { throw fail("an unterminated entity") }
            let entity = rest[rest.index(after: amp)..<semicolon]
            switch entity {
            case "lt": out += "<"
            case "gt": out += ">"
            case "amp": out += "&"
            case "quot": out += "\""
            case "apos": out += "'"
            default:
                let number = entity.hasPrefix("#x") ? UInt32(entity.dropFirst(2), radix: 16) : entity.hasPrefix("#") ? UInt32(entity.dropFirst()) : nil
                guard let number, let scalar = Unicode.Scalar(number) else { throw fail("unknown entity &\(entity);") }
                out.unicodeScalars.append(scalar)
            }
            rest = rest[rest.index(after: semicolon)...]
        }
        return out + rest
    }
}
