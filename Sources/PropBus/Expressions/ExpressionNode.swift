/// A node of a parsed expression. Every node that can fail keeps the 1-based column of its
/// operator, name or function, for static error messages.
indirect enum ExpressionNode: Sendable {
    case literal(ExpressionOperand)
    case value(column: Int)
    case key(String, column: Int)
    case unary(UnaryOperator, ExpressionNode, column: Int)
    case binary(BinaryOperator, ExpressionNode, ExpressionNode, column: Int)
    case conditional(ExpressionNode, ExpressionNode, ExpressionNode, column: Int)
    case call(ExpressionFunction, [ExpressionNode], column: Int)
}

/// A prefix operator.
enum UnaryOperator: String, Sendable {
    case not = "!"
    case negate = "-"

    /// The result kind for an operand of kind `operand`, or `nil` for a type error.
    func resultKind(_ operand: ExpressionKind) -> ExpressionKind? {
        switch self {
        case .not: operand == .boolean ? .boolean : nil
        case .negate: operand.isNumeric ? operand : nil
        }
    }

    func mismatch(_ operand: ExpressionKind?) -> String {
        switch self {
        case .not: "'!' expects 'boolean', got \(operand.quoted)"
        case .negate: "cannot negate \(operand.quoted)"
        }
    }
}

/// An infix operator, with its precedence (higher binds tighter; `?:` is 1).
enum BinaryOperator: String, Sendable, CaseIterable {
    case or = "||"
    case and = "&&"
    case equal = "=="
    case notEqual = "!="
    case less = "<"
    case lessOrEqual = "<="
    case greater = ">"
    case greaterOrEqual = ">="
    case add = "+"
    case subtract = "-"
    case multiply = "*"
    case divide = "/"
    case remainder = "%"

    var precedence: Int {
        switch self {
        case .or: 2
        case .and: 3
        case .equal, .notEqual: 4
        case .less, .lessOrEqual, .greater, .greaterOrEqual: 5
        case .add, .subtract: 6
        case .multiply, .divide, .remainder: 7
        }
    }

    /// The result kind for operands of these kinds, or `nil` for a type error.
    func resultKind(_ lhs: ExpressionKind, _ rhs: ExpressionKind) -> ExpressionKind? {
        switch self {
        case .or, .and:
            return lhs == .boolean && rhs == .boolean ? .boolean : nil
        case .equal, .notEqual:
            return ExpressionKind.areEquatable(lhs, rhs) ? .boolean : nil
        case .less, .lessOrEqual, .greater, .greaterOrEqual:
            return ExpressionKind.areOrderable(lhs, rhs) ? .boolean : nil
        case .add:
            if lhs == .string && rhs == .string { return .string }
            return ExpressionKind.arithmetic(lhs, rhs)
        case .subtract, .multiply, .divide, .remainder:
            return ExpressionKind.arithmetic(lhs, rhs)
        }
    }

    /// The result kind when one or both operand kinds are unknown (`nil`): the kind every
    /// possible combination agrees on, `nil` when they disagree, or a thrown message when no
    /// combination can work.
    func resultKind(possiblyUnknown lhs: ExpressionKind?, _ rhs: ExpressionKind?) -> Result<ExpressionKind?, StaticMismatch> {
        if let lhs, let rhs {
            guard let kind = resultKind(lhs, rhs) else { return .failure(StaticMismatch(mismatch(lhs, rhs))) }
            return .success(kind)
        }
        // An unknown side may be any container too, and containers compare with themselves.
        if self == .equal || self == .notEqual { return .success(.boolean) }
        var results: Set<ExpressionKind> = []
        for left in lhs.map({ [$0] }) ?? ExpressionKind.scalars {
            for right in rhs.map({ [$0] }) ?? ExpressionKind.scalars {
                if let kind = resultKind(left, right) { results.insert(kind) }
            }
        }
        if results.isEmpty { return .failure(StaticMismatch(mismatch(lhs, rhs))) }
        return .success(results.count == 1 ? results.first : nil)
    }

    func mismatch(_ lhs: ExpressionKind?, _ rhs: ExpressionKind?) -> String {
        switch self {
        case .or, .and:
            let culprit = lhs == .boolean ? rhs : lhs
            return "'\(rawValue)' expects 'boolean' operands, got \(culprit.quoted)"
        case .equal, .notEqual:
            return "cannot compare \(lhs.quoted) with \(rhs.quoted)"
        case .less, .lessOrEqual, .greater, .greaterOrEqual:
            return "cannot compare \(lhs.quoted) with \(rhs.quoted) using '\(rawValue)'"
        case .add:
            let hint = (lhs == .string && rhs?.isNumeric == true) || (rhs == .string && lhs?.isNumeric == true)
                ? "; use string() to turn a number into a string" : ""
            return "cannot add \(lhs.quoted) and \(rhs.quoted)\(hint)"
        case .subtract: return "cannot subtract \(rhs.quoted) from \(lhs.quoted)"
        case .multiply: return "cannot multiply \(lhs.quoted) and \(rhs.quoted)"
        case .divide: return "cannot divide \(lhs.quoted) by \(rhs.quoted)"
        case .remainder: return "cannot take the remainder of \(lhs.quoted) divided by \(rhs.quoted)"
        }
    }
}

/// A type error found without evaluating, as a message without its column.
struct StaticMismatch: Error {
    var message: String
    init(_ message: String) { self.message = message }
}
