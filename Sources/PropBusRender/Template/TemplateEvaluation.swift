import DBusValues
import PropBus

/// What a template reads: keys' current values and the keys of a group. The daemon gives the
/// model's (``RenderHost``); tests give a table.
public protocol RenderValues {
    /// The value of `key` and whether the key is secret; `nil` when there is no such key.
    func renderValue(of key: String) -> (value: DBusValue, secret: Bool)?
    /// The names of the keys directly in `group`, sorted; empty for no such group.
    func renderNames(inGroup group: String) -> [String]
}

/// A template's output, and what it read to make it.
public struct RenderOutput: Sendable, Equatable {
    /// The file's bytes.
    public var bytes: [UInt8]
    /// The secret keys whose values (or decisions on them) went into the bytes.
    public var secretKeys: Set<String>
    /// Whether secret values were replaced by `<secret>` (a preview for someone who may not read them).
    public var masked: Bool
}

/// Why a template could not be rendered now: a key it needs is missing (wait for it), or
/// something else is wrong (the message names the tag, never a value).
public enum RenderFailure: Error, Sendable, Equatable {
    case missingKey(String, message: String)
    case failed(String)

    public var message: String {
        switch self {
        case .missingKey(_, let message), .failed(let message): message
        }
    }
}

extension Template {
    /// The largest output, in bytes: a render's file is written whole, from memory.
    public static let maximumOutput = 16 << 20

    /// Renders the template with `values`, writing each output in `escaping` unless its tag
    /// says otherwise. A secret key `hiding` says to hide (a preview for someone who may not
    /// read it) makes a tag whose value reads it write `<secret>`, and a block whose condition
    /// or loop reads it left out, marked.
    public func render(_ values: some RenderValues, escaping: Escaping, hiding: ((String) -> Bool)? = nil,
                       budget: EvaluationBudget = EvaluationBudget()) -> Result<RenderOutput, RenderFailure> {
        var evaluation = TemplateEvaluation(values: values, escaping: escaping, hiding: hiding, budget: budget)
        do throws(RenderFailure) {
            try evaluation.run(nodes)
        } catch {
            return .failure(error)
        }
        return .success(RenderOutput(bytes: evaluation.output, secretKeys: evaluation.secretKeys, masked: evaluation.masked))
    }
}

/// One walk of a template's nodes.
struct TemplateEvaluation<Values: RenderValues> {
    let values: Values
    let escaping: Escaping
    /// Which secret keys to hide; `nil`: none.
    let hiding: ((String) -> Bool)?
    var budget: EvaluationBudget
    var output: [UInt8] = []
    var secretKeys: Set<String> = []
    var masked = false

    /// The items of the loops being walked, innermost last.
    private var loops: [(variable: String, item: LoopItem)] = []

    init(values: Values, escaping: Escaping, hiding: ((String) -> Bool)?, budget: EvaluationBudget) {
        self.values = values
        self.escaping = escaping
        self.hiding = hiding
        self.budget = budget
    }

    struct LoopItem {
        var name: String
        var key: String
        var value: DBusValue
        var secret: Bool
        var index: Int
        var count: Int
    }

    static var secretMark: [UInt8] { Array("<secret>".utf8) }

    /// Whether any of `secrets` (keys read) is to be hidden.
    private func hides(_ secrets: Set<String>) -> Bool {
        guard let hiding else { return false }
        return secrets.contains(where: hiding)
    }

    mutating func run(_ nodes: [TemplateNode]) throws(RenderFailure) {
        for node in nodes {
            switch node {
            case .text(let bytes):
                try write(bytes)
            case .output(let tag):
                let (value, secrets) = try evaluate(tag)
                if hides(secrets) {
                    masked = true
                    try write(Self.secretMark)
                    continue
                }
                switch (tag.escaping ?? escaping).write(value) {
                case .success(let text): try write(Array(text.utf8))
                case .failure(let refusal):
                    throw .failed("\(tag.location): \(tag.shown): \(refusal.message)")
                }
            case .conditional(let branches, let otherwise):
                try conditional(branches, otherwise: otherwise)
            case .range(let loop):
                try range(loop)
            }
        }
    }

    private mutating func conditional(_ branches: [TemplateNode.Branch], otherwise: [TemplateNode]) throws(RenderFailure) {
        for branch in branches {
            let (value, secrets) = try evaluate(branch.condition)
            if hides(secrets) {
                masked = true
                try write(Array("<secret: the {{ if }} at \(branch.condition.location) decides on a secret key>\n".utf8))
                return
            }
            guard case .boolean(let holds) = value else {
                throw .failed("\(branch.condition.location): the condition \(branch.condition.shown) must be a boolean, got '\(value.type.name)'; compare it, e.g. length(x) > 0 or x != \"\"")
            }
            if holds { return try run(branch.body) }
        }
        try run(otherwise)
    }

    private mutating func range(_ loop: TemplateNode.RangeLoop) throws(RenderFailure) {
        var items: [LoopItem] = []
        switch loop.source {
        case .group(let group):
            let names = values.renderNames(inGroup: group)
            for (index, name) in names.enumerated() {
                let key = group + "." + name
                guard let (value, secret) = values.renderValue(of: key) else { continue }
                items.append(LoopItem(name: name, key: key, value: value, secret: secret, index: index, count: names.count))
            }
        case .key(let key):
            guard let (value, secretKey) = lookup(key) else {
                throw .missingKey(key, message: "\(loop.location): the {{ range }} walks \(key), which does not exist")
            }
            if let secretKey {
                secretKeys.insert(secretKey)
                if hides([secretKey]) {
                    masked = true
                    try write(Array("<secret: the {{ range }} at \(loop.location) walks a secret key>\n".utf8))
                    return
                }
            }
            // The items of a secret key's value are as secret as it is, under its name.
            items = try Self.elements(of: value, key: secretKey ?? key, secret: secretKey != nil, at: loop.location)
        }
        guard !items.isEmpty else { return try run(loop.otherwise) }
        for var item in items {
            item.count = items.count
            loops.append((loop.variable, item))
            defer { loops.removeLast() }
            try run(loop.body)
        }
    }

    /// An array's elements or a dict's entries as loop items.
    private static func elements(of value: DBusValue, key: String, secret: Bool, at location: TemplateLocation) throws(RenderFailure) -> [LoopItem] {
        switch value {
        case .variant(let inner):
            return try elements(of: inner, key: key, secret: secret, at: location)
        case .array(_, let items):
            return items.enumerated().map { LoopItem(name: String($0.offset), key: key, value: $0.element, secret: secret, index: $0.offset, count: items.count) }
        case .bytes(let bytes):
            return bytes.enumerated().map { LoopItem(name: String($0.offset), key: key, value: .byte($0.element), secret: secret, index: $0.offset, count: bytes.count) }
        case .dictionary(_, _, let entries):
            return entries.enumerated().map {
                LoopItem(name: ValueText.format($0.element.key), key: key, value: $0.element.value, secret: secret, index: $0.offset, count: entries.count)
            }
        default:
            throw .failed("\(location): the {{ range }} walks \(key), a '\(value.type.name)': only an array or a dict can be walked (or a group: GROUP.*)")
        }
    }

    /// A key's value through the loops in scope: `VAR.FIELD` of a loop variable, else the key.
    /// The value of `key` and, when it is secret, the secret key it is (a loop item's key for
    /// `VAR.value`).
    private func lookup(_ key: String) -> (value: DBusValue, secretKey: String?)? {
        Self.lookup(key, loops: loops, values: values)
    }

    private static func lookup(_ key: String, loops: [(variable: String, item: LoopItem)], values: Values) -> (value: DBusValue, secretKey: String?)? {
        let parts = key.split(separator: ".", omittingEmptySubsequences: false)
        if parts.count == 2, let loop = loops.last(where: { $0.variable == parts[0] }), let field = LoopField(rawValue: String(parts[1])) {
            let item = loop.item
            switch field {
            case .name: return (.string(item.name), nil)
            case .key: return (.string(item.key), nil)
            case .value: return (item.value, item.secret ? item.key : nil)
            case .index: return (.int64(Int64(item.index)), nil)
            case .first: return (.boolean(item.index == 0), nil)
            case .last: return (.boolean(item.index == item.count - 1), nil)
            }
        }
        return values.renderValue(of: key).map { ($0.value, $0.secret ? key : nil) }
    }

    /// Evaluates a tag's expression; returns its value and the secret keys it read.
    private mutating func evaluate(_ tag: TemplateExpression) throws(RenderFailure) -> (DBusValue, Set<String>) {
        var missing: String?
        var secrets: Set<String> = []
        let result: Result<DBusValue, PropBusError>
        // Copies: the closure reads them while the budget is spent.
        let loops = loops, values = values
        var budget = budget
        defer { self.budget = budget }
        do throws(PropBusError) {
            let value = try tag.expression.evaluate(value: nil, budget: &budget) { key in
                guard let (value, secretKey) = Self.lookup(key, loops: loops, values: values) else {
                    if missing == nil { missing = key }
                    return nil
                }
                if let secretKey { secrets.insert(secretKey) }
                return value
            }
            result = .success(value)
        } catch {
            result = .failure(error)
        }
        secretKeys.formUnion(secrets)
        switch result {
        case .success(let value):
            return (value, secrets)
        case .failure(let error):
            if let missing { throw .missingKey(missing, message: "\(tag.location): \(tag.shown) reads \(missing), which does not exist") }
            // An evaluation error may quote what it read (int() of a string): not a secret's.
            if let secret = secrets.sorted().first {
                throw .failed("\(tag.location): \(tag.shown) failed; the reason is withheld because it reads secret key \(secret)")
            }
            throw .failed("\(tag.location): \(tag.shown): \(error.message)")
        }
    }

    private mutating func write(_ bytes: [UInt8]) throws(RenderFailure) {
        guard output.count + bytes.count <= Template.maximumOutput else {
            throw .failed("the output passed \(Template.maximumOutput) bytes, the most a render writes")
        }
        output += bytes
    }
}
