import PropBus

/// A render's template (docs/render.md): text with `{{ … }}` tags in the style of Go templates
/// and Mustache, whose values and conditions are expressions of the project's expression
/// language (docs/expressions.md).
///
/// ```
/// upstream backend {
/// {{ range server in web.backends.* }}
///     server {{ server.value }};
/// {{ else }}
///     server 127.0.0.1:8080 down;
/// {{ end }}
/// }
/// listen {{ web.port }};
/// {{ if web.tls }}
/// ssl_certificate {{ web.certificate | raw }};
/// {{ end }}
/// ```
///
/// Parsed once, when its model file is read; rendering it reads keys only (``render(_:)``).
public struct Template: Sendable, Equatable {
    /// The longest template accepted, in bytes.
    public static let maximumLength = 1 << 20

    /// The text the template was parsed from.
    public let text: String
    let nodes: [TemplateNode]
    /// Keys the template reads wherever its conditions lead (loop variables left out).
    public let keys: Set<String>
    /// Groups whose keys a `range` walks: a key coming, going or changing there changes the output.
    public let groups: Set<String>

    /// Parses `text`; a problem names its line and column.
    public init(_ text: String) throws(TemplateError) {
        guard text.utf8.count <= Self.maximumLength else {
            throw TemplateError(TemplateLocation(line: 1, column: 1), "the template is \(text.utf8.count) bytes long; the limit is \(Self.maximumLength)")
        }
        var parser = TemplateParser()
        let pieces = try TemplateScanner(text).scan()
        nodes = try parser.parse(pieces)
        keys = parser.keys
        groups = parser.groups
        self.text = text
    }

    /// Two templates are equal when their texts are.
    public static func == (lhs: Template, rhs: Template) -> Bool { lhs.text == rhs.text }
}

/// Builds the node tree from the scanner's pieces, checking every tag.
struct TemplateParser {
    private(set) var keys: Set<String> = []
    private(set) var groups: Set<String> = []

    /// A block being read: its kind, the nodes of its current body, where it opened.
    private struct Frame {
        enum Kind {
            case conditional(branches: [TemplateNode.Branch], condition: TemplateExpression?, inElse: Bool)
            case range(variable: String, source: RangeSource, body: [TemplateNode]?, inElse: Bool)
        }
        var kind: Kind
        var nodes: [TemplateNode] = []
        var location: TemplateLocation
        var word: String
    }

    private var frames: [Frame] = []
    private var top: [TemplateNode] = []

    private var loopVariables: [String] {
        frames.compactMap { if case .range(let variable, _, _, _) = $0.kind { variable } else { nil } }
    }

    mutating func parse(_ pieces: [TemplateScanner.Piece]) throws(TemplateError) -> [TemplateNode] {
        for piece in pieces {
            switch piece {
            case .text(let bytes): append(.text(bytes))
            case .tag(_, _, isComment: true): continue
            case .tag(let content, let location, isComment: false): try tag(content, at: location)
            }
        }
        if let open = frames.last {
            throw TemplateError(open.location, "{{ \(open.word) }} is not closed: add {{ end }}")
        }
        return top
    }

    private mutating func append(_ node: TemplateNode) {
        if frames.isEmpty { top.append(node) } else { frames[frames.count - 1].nodes.append(node) }
    }

    private mutating func tag(_ content: String, at location: TemplateLocation) throws(TemplateError) {
        let word = String(content.prefix { !$0.isWhitespace })
        let rest = String(content.dropFirst(word.count).drop { $0.isWhitespace })
        switch word {
        case "if":
            guard !rest.isEmpty else { throw TemplateError(location, "{{ if }} needs a condition: {{ if EXPRESSION }}") }
            let condition = try expression(rest, at: location, allowsEscaping: false)
            frames.append(Frame(kind: .conditional(branches: [], condition: condition, inElse: false), location: location, word: "if"))
        case "else":
            try elseTag(rest, at: location)
        case "end":
            guard rest.isEmpty else { throw TemplateError(location, "{{ end }} takes nothing after it") }
            try end(at: location)
        case "range":
            try rangeTag(rest, at: location)
        case "":
            throw TemplateError(location, "empty tag {{ }}: write an expression, or if, else, end, range")
        default:
            append(.output(try expression(content, at: location, allowsEscaping: true)))
        }
    }

    private mutating func elseTag(_ rest: String, at location: TemplateLocation) throws(TemplateError) {
        guard var frame = frames.popLast() else { throw TemplateError(location, "{{ else }} outside {{ if }} or {{ range }}") }
        switch frame.kind {
        case .conditional(var branches, let condition, let inElse):
            guard !inElse, let condition else { throw TemplateError(location, "a second {{ else }} in the {{ if }} at \(frame.location)") }
            branches.append(TemplateNode.Branch(condition: condition, body: frame.nodes))
            frame.nodes = []
            if rest.isEmpty {
                frame.kind = .conditional(branches: branches, condition: nil, inElse: true)
            } else {
                guard rest.hasPrefix("if"), rest.dropFirst(2).first?.isWhitespace == true else {
                    throw TemplateError(location, "expected {{ else }} or {{ else if EXPRESSION }}")
                }
                let next = try expression(String(rest.dropFirst(2).drop { $0.isWhitespace }), at: location, allowsEscaping: false)
                frame.kind = .conditional(branches: branches, condition: next, inElse: false)
            }
        case .range(let variable, let source, let body, let inElse):
            guard !inElse, body == nil, rest.isEmpty else {
                throw TemplateError(location, rest.isEmpty ? "a second {{ else }} in the {{ range }} at \(frame.location)" : "{{ else if }} cannot follow {{ range }}: write {{ else }}")
            }
            frame.kind = .range(variable: variable, source: source, body: frame.nodes, inElse: true)
            frame.nodes = []
        }
        frames.append(frame)
    }

    private mutating func end(at location: TemplateLocation) throws(TemplateError) {
        guard let frame = frames.popLast() else { throw TemplateError(location, "{{ end }} without {{ if }} or {{ range }}") }
        switch frame.kind {
        case .conditional(var branches, let condition, let inElse):
            if let condition, !inElse { branches.append(TemplateNode.Branch(condition: condition, body: frame.nodes)) }
            append(.conditional(branches, otherwise: inElse ? frame.nodes : []))
        case .range(let variable, let source, let body, let inElse):
            append(.range(TemplateNode.RangeLoop(variable: variable, source: source, body: inElse ? body ?? [] : frame.nodes,
                                                 otherwise: inElse ? frame.nodes : [], location: frame.location)))
        }
    }

    /// `range VAR in GROUP.*` or `range VAR in KEY`.
    private mutating func rangeTag(_ rest: String, at location: TemplateLocation) throws(TemplateError) {
        let words = rest.split(whereSeparator: \.isWhitespace).map(String.init)
        guard words.count == 3, words[1] == "in" else {
            throw TemplateError(location, "expected {{ range VAR in GROUP.* }} or {{ range VAR in KEY }}")
        }
        let variable = words[0]
        guard Self.isName(variable) else {
            throw TemplateError(location, "the loop variable '\(variable)' must be a name ([A-Za-z_][A-Za-z0-9_]*)")
        }
        guard !loopVariables.contains(variable) else {
            throw TemplateError(location, "the loop variable '\(variable)' is already in use by an enclosing {{ range }}")
        }
        let source: RangeSource
        if words[2].hasSuffix(".*") {
            let group = String(words[2].dropLast(2))
            guard (try? Key(group + ".x")) != nil else { throw TemplateError(location, "'\(words[2])' is not GROUP.* with a valid group") }
            source = .group(group)
            groups.insert(group)
        } else {
            do { _ = try Key(words[2]) } catch { throw TemplateError(location, "'\(words[2])' is neither GROUP.* nor a key: \(error.message)") }
            source = .key(words[2])
            if !isLoopField(words[2]) { keys.insert(words[2]) }
        }
        frames.append(Frame(kind: .range(variable: variable, source: source, body: nil, inElse: false), location: location, word: "range"))
    }

    /// An expression, with `| ESCAPING` after it where an output allows one.
    private mutating func expression(_ text: String, at location: TemplateLocation, allowsEscaping: Bool) throws(TemplateError) -> TemplateExpression {
        var source = text
        var escaping: Escaping?
        if let bar = Self.escapingBar(in: text) {
            let name = text[text.index(after: bar)...].trimmingBlanks
            guard allowsEscaping else { throw TemplateError(location, "a condition takes no '| \(name)': escaping applies to what is written") }
            guard let mode = Escaping(rawValue: name) else {
                throw TemplateError(location, "unknown escaping '| \(name)'; the escapings are \(Escaping.names)")
            }
            escaping = mode
            source = String(text[..<bar]).trimmingBlanks
        }
        let parsed: Expression
        do { parsed = try Expression(parsing: source) } catch {
            throw TemplateError(location, "in {{ \(source) }}: \(error.message)")
        }
        for key in parsed.referencedKeys {
            if let (variable, field) = loopReference(key) {
                guard LoopField(rawValue: field) != nil else {
                    throw TemplateError(location, "in {{ \(source) }}: the loop variable '\(variable)' has no field '\(field)'; it has \(LoopField.names)")
                }
            } else {
                keys.insert(key)
            }
        }
        return TemplateExpression(expression: parsed, escaping: escaping, location: location)
    }

    /// `VAR.FIELD` of a loop variable in scope, split.
    private func loopReference(_ key: String) -> (String, String)? {
        let parts = key.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, loopVariables.contains(String(parts[0])) else { return nil }
        return (String(parts[0]), String(parts[1]))
    }

    private func isLoopField(_ key: String) -> Bool { loopReference(key) != nil }

    /// The offset of a `|` that is not part of `||` and not inside a string literal.
    static func escapingBar(in text: String) -> String.Index? {
        var quote: Character?
        var index = text.startIndex
        while index < text.endIndex {
            let character = text[index]
            if let open = quote {
                if character == "\\" {
                    index = text.index(after: index)
                    if index < text.endIndex { index = text.index(after: index) }
                    continue
                }
                if character == open { quote = nil }
            } else if character == "\"" || character == "'" {
                quote = character
            } else if character == "|" {
                let next = text.index(after: index)
                if next < text.endIndex, text[next] == "|" {
                    index = text.index(after: next)
                    continue
                }
                return index
            }
            index = text.index(after: index)
        }
        return nil
    }

    static func isName(_ word: String) -> Bool {
        guard let first = word.unicodeScalars.first, first.isASCII, first.properties.isAlphabetic || first == "_" else { return false }
        return word.unicodeScalars.allSatisfy { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "_") }
    }
}

extension StringProtocol {
    var trimmingBlanks: String {
        String(drop { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }.reversed().drop { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }.reversed())
    }
}
