import PropBus

/// One `{{ … }}` expression of a template: what it computes, how its value is written, where it is.
struct TemplateExpression: Sendable {
    var expression: Expression
    /// `| NAME` after the expression; `nil`: the render's own escaping.
    var escaping: Escaping?
    var location: TemplateLocation

    /// The tag as written, shortened, for messages (template text, never a value).
    var shown: String {
        let text = expression.text + (escaping.map { " | \($0.rawValue)" } ?? "")
        return "{{ " + (text.count > 60 ? String(text.prefix(60)) + "…" : text) + " }}"
    }
}

/// What a `range` walks.
enum RangeSource: Sendable, Equatable {
    /// `GROUP.*`: the keys directly in a group, in name order.
    case group(String)
    /// `KEY`: the elements of an array (or the entries of a dict) a key holds.
    case key(String)

    var shown: String {
        switch self {
        case .group(let group): group + ".*"
        case .key(let key): key
        }
    }
}

/// A parsed template: literal text, expressions, conditionals and loops.
indirect enum TemplateNode: Sendable {
    case text([UInt8])
    case output(TemplateExpression)
    /// `if` / `else if` … with their bodies, then the `else` body (empty without one).
    case conditional([Branch], otherwise: [TemplateNode])
    case range(RangeLoop)

    struct Branch: Sendable {
        var condition: TemplateExpression
        var body: [TemplateNode]
    }

    struct RangeLoop: Sendable {
        /// The loop variable: `VAR.name`, `VAR.key`, `VAR.value`, `VAR.index`, `VAR.first`, `VAR.last`.
        var variable: String
        var source: RangeSource
        var body: [TemplateNode]
        /// The `else` body, written when there is nothing to walk.
        var otherwise: [TemplateNode]
        var location: TemplateLocation
    }
}

/// The fields of a range's loop variable.
enum LoopField: String, CaseIterable {
    /// The key's name in its group, a dict entry's key, an array element's index as text.
    case name
    /// The whole key (`GROUP.NAME`) of a group's key; the range's key otherwise.
    case key
    case value
    /// 0 for the first item.
    case index
    case first
    case last

    static var names: String { allCases.map { "VAR.\($0.rawValue)" }.joined(separator: ", ") }
}
