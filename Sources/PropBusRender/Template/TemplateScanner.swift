import PropBus

/// Where something is in a template: 1-based line and column, the column in bytes (as model
/// files' errors count them).
public struct TemplateLocation: Sendable, Hashable, CustomStringConvertible {
    public var line: Int
    public var column: Int

    public init(line: Int, column: Int) {
        self.line = line
        self.column = column
    }

    public var description: String { "\(line):\(column)" }
}

/// A template's text cut into literal text and `{{ … }}` tags, with Mustache's standalone
/// lines and Go's `{{-`/`-}}` trimming already applied to the text around the tags.
struct TemplateScanner {
    /// A piece of the template.
    enum Piece {
        case text([UInt8])
        /// A tag's inside, without the braces and trim markers, trimmed of blanks.
        case tag(String, TemplateLocation, isComment: Bool)
    }

    private let bytes: [UInt8]
    /// Byte offsets where each line starts, for locations.
    private let lineStarts: [Int]

    init(_ text: String) {
        bytes = Array(text.utf8)
        var starts = [0]
        for (offset, byte) in bytes.enumerated() where byte == UInt8(ascii: "\n") { starts.append(offset + 1) }
        lineStarts = starts
    }

    func location(ofByte offset: Int) -> TemplateLocation {
        var low = 0, high = lineStarts.count
        while high - low > 1 {
            let middle = (low + high) / 2
            if lineStarts[middle] <= offset { low = middle } else { high = middle }
        }
        return TemplateLocation(line: low + 1, column: offset - lineStarts[low] + 1)
    }

    private struct RawTag {
        var content: String
        var location: TemplateLocation
        var isComment: Bool
        var trimsBefore: Bool
        var trimsAfter: Bool
        /// Control tags (not output) may stand alone on a line, which then vanishes.
        var isControl: Bool
    }

    /// The pieces, or a `location: problem` message.
    func scan() throws(TemplateError) -> [Piece] {
        var texts: [[UInt8]] = []
        var tags: [RawTag] = []
        var index = 0, textStart = 0
        while index + 1 < bytes.count {
            guard bytes[index] == UInt8(ascii: "{"), bytes[index + 1] == UInt8(ascii: "{") else {
                index += 1
                continue
            }
            texts.append(Array(bytes[textStart..<index]))
            let (tag, end) = try readTag(at: index)
            tags.append(tag)
            index = end
            textStart = end
        }
        texts.append(Array(bytes[textStart...]))
        // texts.count == tags.count + 1: text, tag, text, …, tag, text.
        applyStandaloneLines(&texts, tags)
        for (position, tag) in tags.enumerated() {
            if tag.trimsBefore { texts[position] = Self.droppingTrailingWhitespace(texts[position]) }
            if tag.trimsAfter { texts[position + 1] = Self.droppingLeadingWhitespace(texts[position + 1]) }
        }
        var pieces: [Piece] = []
        for (position, text) in texts.enumerated() {
            if !text.isEmpty { pieces.append(.text(text)) }
            if position < tags.count { pieces.append(.tag(tags[position].content, tags[position].location, isComment: tags[position].isComment)) }
        }
        return pieces
    }

    /// Reads the tag whose `{{` is at `start`; returns it and the offset after its `}}`.
    private func readTag(at start: Int) throws(TemplateError) -> (RawTag, Int) {
        let location = location(ofByte: start)
        var inner = start + 2
        // "{{- " trims; "{{-3}}" is the number -3 (Go's rule: the dash needs a blank after it).
        var trimsBefore = false
        if inner + 1 < bytes.count, bytes[inner] == UInt8(ascii: "-"), Self.isBlank(bytes[inner + 1]) {
            trimsBefore = true
            inner += 1
        }
        var cursor = inner
        while cursor < bytes.count, Self.isBlank(bytes[cursor]) { cursor += 1 }
        let isComment = cursor + 1 < bytes.count && bytes[cursor] == UInt8(ascii: "/") && bytes[cursor + 1] == UInt8(ascii: "*")
        guard let close = isComment ? closingOfComment(from: cursor + 2) : closingOfTag(from: inner) else {
            let what = isComment ? "the comment {{/* at \(location) is not closed with */}}"
                : "{{ at \(location) is not closed with }} (a string in it may be unterminated; write a literal {{ as {{ \"{{\" }})"
            throw TemplateError(location, what)
        }
        var contentEnd = close
        var trimsAfter = false
        if contentEnd - 2 >= inner, bytes[contentEnd - 1] == UInt8(ascii: "-"), Self.isBlank(bytes[contentEnd - 2]) {
            trimsAfter = true
            contentEnd -= 1
        }
        let raw = inner < contentEnd ? Array(bytes[inner..<contentEnd]) : []
        let content = String(decoding: Self.droppingTrailingWhitespace(Self.droppingLeadingWhitespace(raw)), as: UTF8.self)
        let isControl = isComment || Self.isControl(content)
        return (RawTag(content: content, location: location, isComment: isComment, trimsBefore: trimsBefore,
                       trimsAfter: trimsAfter, isControl: isControl), close + 2)
    }

    /// The offset of the `}}` that closes a tag whose inside starts at `start`, skipping string
    /// literals (an expression may hold `"}}"`).
    private func closingOfTag(from start: Int) -> Int? {
        var index = start
        var quote: UInt8?
        while index < bytes.count {
            let byte = bytes[index]
            if let open = quote {
                if byte == UInt8(ascii: "\\") { index += 2; continue }
                if byte == open { quote = nil }
            } else if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") {
                quote = byte
            } else if byte == UInt8(ascii: "}"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "}") {
                return index
            }
            index += 1
        }
        return nil
    }

    /// The offset of the `}}` after a comment's `*/` (blanks and a trim dash may come between).
    private func closingOfComment(from start: Int) -> Int? {
        var index = start
        while index + 1 < bytes.count {
            if bytes[index] == UInt8(ascii: "*"), bytes[index + 1] == UInt8(ascii: "/") {
                var after = index + 2
                while after < bytes.count, Self.isBlank(bytes[after]) || bytes[after] == UInt8(ascii: "-") { after += 1 }
                if after + 1 < bytes.count, bytes[after] == UInt8(ascii: "}"), bytes[after + 1] == UInt8(ascii: "}") { return after }
            }
            index += 1
        }
        return nil
    }

    /// Mustache's rule: a control tag alone on its line (blanks around it) takes the line with
    /// it, so `{{ range … }}` and `{{ end }}` on lines of their own leave no blank lines behind.
    /// Decided on the text as written, then applied, so two such lines in a row both go.
    private func applyStandaloneLines(_ texts: inout [[UInt8]], _ tags: [RawTag]) {
        var cuts: [Int] = []
        for (position, tag) in tags.enumerated() where tag.isControl {
            let before = texts[position], after = texts[position + 1]
            // The line must start before the tag: a newline in the text before, or the template's start.
            let lineStart = before.lastIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? (position == 0 ? 0 : nil)
            guard let lineStart, before[lineStart...].allSatisfy(Self.isInlineBlank) else { continue }
            let isLast = position == tags.count - 1
            let newline = after.firstIndex(of: UInt8(ascii: "\n"))
            guard let lineEnd = newline ?? (isLast ? after.count : nil), after[..<lineEnd].allSatisfy(Self.isInlineBlank) else { continue }
            cuts.append(position)
        }
        // The blanks before each tag (after the text's last newline) first, then each tag's
        // line end (up to the text's first newline): the two never overlap in one text, so
        // a text between two standalone tags loses both ends.
        for position in cuts {
            let before = texts[position]
            texts[position] = before.lastIndex(of: UInt8(ascii: "\n")).map { Array(before[...$0]) } ?? []
        }
        for position in cuts {
            let after = texts[position + 1]
            texts[position + 1] = after.firstIndex(of: UInt8(ascii: "\n")).map { Array(after[($0 + 1)...]) } ?? []
        }
    }

    /// Whether a tag's inside is a control tag (`if`, `else`, `end`, `range`), not an output.
    static func isControl(_ content: String) -> Bool {
        let word = content.prefix { !$0.isWhitespace }
        return word == "if" || word == "else" || word == "end" || word == "range"
    }

    static func isBlank(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") || byte == UInt8(ascii: "\n") || byte == UInt8(ascii: "\r")
    }

    static func isInlineBlank(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") || byte == UInt8(ascii: "\r")
    }

    static func droppingTrailingWhitespace(_ bytes: [UInt8]) -> [UInt8] {
        var end = bytes.count
        while end > 0, isBlank(bytes[end - 1]) { end -= 1 }
        return Array(bytes[..<end])
    }

    static func droppingLeadingWhitespace(_ bytes: [UInt8]) -> [UInt8] {
        var start = 0
        while start < bytes.count, isBlank(bytes[start]) { start += 1 }
        return Array(bytes[start...])
    }
}

/// A problem with a template, found when it is read: where, and what.
public struct TemplateError: Error, Sendable, Equatable, CustomStringConvertible {
    public var location: TemplateLocation
    public var problem: String

    public init(_ location: TemplateLocation, _ problem: String) {
        self.location = location
        self.problem = problem
    }

    public var description: String { "\(location): \(problem)" }
}
