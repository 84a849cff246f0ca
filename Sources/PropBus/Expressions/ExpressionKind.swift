import DBus

/// What an expression value is, as far as the expression language cares: integers of every
/// D-Bus width are one kind, and so are `s`, `o` and `g`.
///
/// The same kinds serve the evaluator (the kind of a value) and the static checker (the kind
/// of a type), so both give the same messages for the same mistake.
enum ExpressionKind: Hashable, Sendable {
    case integer
    case double
    case string
    case boolean
    /// Anything the operators do not look inside: containers and `h`.
    case other(DBusType)

    /// The kinds a value of unknown type may have, for the operators that take only scalars.
    static let scalars: [ExpressionKind] = [.integer, .double, .string, .boolean]

    /// The kind values of `type` read as, or `nil` when that is only known at run time (`v`).
    init?(of type: DBusType) {
        switch type {
        case .byte, .int16, .uint16, .int32, .uint32, .int64, .uint64: self = .integer
        case .double: self = .double
        case .string, .objectPath, .signature: self = .string
        case .boolean: self = .boolean
        case .variant: return nil
        case .unixFD, .array, .dictionary, .structure: self = .other(type)
        }
    }

    /// The D-Bus type of an evaluation result of this kind.
    var type: DBusType {
        switch self {
        case .integer: .int64
        case .double: .double
        case .string: .string
        case .boolean: .boolean
        case .other(let type): type
        }
    }

    /// The kind's type name in quotes, as messages and docs/expressions.md name it: `'int64'`.
    var quoted: String { "'\(type.name)'" }

    var isNumeric: Bool { self == .integer || self == .double }

    /// Whether `==` and `!=` can compare the two kinds.
    static func areEquatable(_ lhs: ExpressionKind, _ rhs: ExpressionKind) -> Bool {
        (lhs.isNumeric && rhs.isNumeric) || lhs == rhs
    }

    /// Whether `<`, `<=`, `>`, `>=`, `min` and `max` can order the two kinds.
    static func areOrderable(_ lhs: ExpressionKind, _ rhs: ExpressionKind) -> Bool {
        (lhs.isNumeric && rhs.isNumeric) || (lhs == .string && rhs == .string)
    }

    /// The kind of arithmetic on two numbers: integer only when both are.
    static func arithmetic(_ lhs: ExpressionKind, _ rhs: ExpressionKind) -> ExpressionKind? {
        guard lhs.isNumeric && rhs.isNumeric else { return nil }
        return lhs == .integer && rhs == .integer ? .integer : .double
    }
}

extension Optional where Wrapped == ExpressionKind {
    /// A statically known kind in quotes, or a phrase for one that is not known.
    var quoted: String { self?.quoted ?? "a value of unknown type" }
}
