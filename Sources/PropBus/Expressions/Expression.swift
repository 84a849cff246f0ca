import DBusValues

/// An expression (docs/expressions.md), used for binding transforms and command predicates.
///
/// ```
/// value == "1" ? "On" : "Off"
/// length(viewmodel.searchText) > 3
/// ```
///
/// Parsing reports `InvalidExpression` with the column and what was expected. Evaluation
/// reports `TransformFailed` with what went wrong. Neither ever crashes: the text length and
/// the nesting depth are bounded.
public struct Expression: Sendable, Hashable, CustomStringConvertible {
    /// The longest expression text accepted, in UTF-8 bytes.
    public static let maximumLength = 4096
    /// The deepest nesting accepted, counting parentheses, operators and calls.
    public static let maximumDepth = 256

    /// The text the expression was parsed from.
    public let text: String
    let root: ExpressionNode
    private let keys: Set<String>
    private let readsValue: Bool

    /// Parses `text`; throws `.invalidExpression` ("column N: expected …, found …").
    public init(parsing text: String) throws(PropBusError) {
        guard text.utf8.count <= Self.maximumLength else {
            throw PropBusError(.invalidExpression, "the expression is \(text.utf8.count) bytes long; the limit is \(Self.maximumLength)")
        }
        var parser = try ExpressionParser(text)
        root = try parser.parse()
        keys = parser.keys
        readsValue = parser.usesValue
        self.text = text
    }

    /// The keys the expression names (not `value`).
    public var referencedKeys: Set<String> { keys }

    /// Whether the expression reads `value`.
    public var usesValue: Bool { readsValue }

    /// The source text.
    public var description: String { text }

    /// Two expressions are equal when their texts are.
    public static func == (lhs: Expression, rhs: Expression) -> Bool { lhs.text == rhs.text }
    public func hash(into hasher: inout Hasher) { hasher.combine(text) }

    /// Evaluates with `value` bound to the incoming value (nil when there is none, e.g.
    /// predicates) and keys resolved through `lookup` (nil → unknown key error).
    ///
    /// The result is `x` for integers, `d`, `s` or `b`, or a container as read; use
    /// ``convert(_:to:)`` for the target type. Throws `.transformFailed` with a clear message.
    public func evaluate(value: DBusValue?, lookup: (String) -> DBusValue?) throws(PropBusError) -> DBusValue {
        var budget = EvaluationBudget()
        return try evaluate(value: value, budget: &budget, lookup: lookup)
    }

    /// Evaluates within `budget`, which it spends (share one budget across a chain of
    /// evaluations to bound the chain); throws `.limitsExceeded` when the budget runs out or an
    /// intermediate string would pass its size limit.
    public func evaluate(value: DBusValue?, budget: inout EvaluationBudget, lookup: (String) -> DBusValue?) throws(PropBusError) -> DBusValue {
        // The evaluator holds `lookup` only for the duration of this call.
        let start = budget
        let (outcome, left) = withoutActuallyEscaping(lookup) { (lookup) -> (Result<DBusValue, PropBusError>, EvaluationBudget) in
            var evaluator = ExpressionEvaluator(value: value, lookup: lookup, budget: start)
            do throws(PropBusError) {
                return (.success(try evaluator.evaluate(root).dbusValue), evaluator.budget)
            } catch {
                return (.failure(error), evaluator.budget)
            }
        }
        budget = left
        return try outcome.get()
    }

    /// Static type of the result given the type of `value` and of keys, or nil when it can't
    /// be known statically (e.g. ?: with branches of different types, a key of type v).
    ///
    /// Throws `.invalidExpression` ("column N: cannot add 'boolean' and 'int64'") for a definite type
    /// error, e.g. `value + 1` when value is a boolean. A nil `valueType` or key type is unknown,
    /// not an error.
    public func resultType(valueType: DBusType?, keyType: (String) -> DBusType?) throws(PropBusError) -> DBusType? {
        try withoutActuallyEscaping(keyType) { (keyType) throws(PropBusError) in
            let checker = ExpressionTypeChecker(valueType: valueType, keyType: keyType)
            return try checker.kind(of: root)?.type
        }
    }
}
