import DBusValues

/// A value during evaluation: integers are widened to `Int64`, variants unwrapped, and `o`/`g`
/// read as strings.
enum ExpressionOperand: Hashable, Sendable {
    case integer(Int64)
    case double(Double)
    case string(String)
    case boolean(Bool)
    /// A container or `h`, kept as it is.
    case other(DBusValue)

    /// Reads a D-Bus value.
    ///
    /// Throws `.transformFailed` for a `t` beyond `Int64.max`, which expression arithmetic
    /// cannot represent exactly.
    init(reading value: DBusValue) throws(PropBusError) {
        switch value {
        case .byte(let v): self = .integer(Int64(v))
        case .int16(let v): self = .integer(Int64(v))
        case .uint16(let v): self = .integer(Int64(v))
        case .int32(let v): self = .integer(Int64(v))
        case .uint32(let v): self = .integer(Int64(v))
        case .int64(let v): self = .integer(v)
        case .uint64(let v):
            guard let signed = Int64(exactly: v) else {
                throw PropBusError(.transformFailed, "\(v) ('t') is larger than expressions can compute with (\(Int64.max))")
            }
            self = .integer(signed)
        case .double(let v): self = .double(v)
        case .string(let s), .objectPath(let s), .signature(let s): self = .string(s)
        case .boolean(let b): self = .boolean(b)
        case .variant(let inner): self = try ExpressionOperand(reading: inner)
        case .unixFD, .array, .bytes, .dictionary, .structure: self = .other(value)
        }
    }

    var kind: ExpressionKind {
        switch self {
        case .integer: .integer
        case .double: .double
        case .string: .string
        case .boolean: .boolean
        case .other(let value): .other(value.type)
        }
    }

    /// The evaluation result: `x`, `d`, `s`, `b`, or the container as read.
    var dbusValue: DBusValue {
        switch self {
        case .integer(let v): .int64(v)
        case .double(let v): .double(v)
        case .string(let s): .string(s)
        case .boolean(let b): .boolean(b)
        case .other(let value): value
        }
    }

    /// The number as a `Double`, for mixed arithmetic.
    var doubleValue: Double? {
        switch self {
        case .integer(let v): Double(v)
        case .double(let v): v
        default: nil
        }
    }

    /// Whether two values of equatable kinds are equal; numbers compare by value across
    /// integer and double. `nil` when the kinds cannot be compared.
    static func areEqual(_ lhs: ExpressionOperand, _ rhs: ExpressionOperand) -> Bool? {
        switch (lhs, rhs) {
        case (.string(let a), .string(let b)): return a == b
        case (.boolean(let a), .boolean(let b)): return a == b
        case (.other(let a), .other(let b)): return a.type == b.type ? a == b : nil
        default:
            guard lhs.kind.isNumeric && rhs.kind.isNumeric else { return nil }
            return order(lhs, rhs) == 0
        }
    }

    /// -1, 0 or 1 for two orderable values; `nil` when they cannot be ordered (NaN included).
    static func order(_ lhs: ExpressionOperand, _ rhs: ExpressionOperand) -> Int? {
        switch (lhs, rhs) {
        case (.integer(let a), .integer(let b)): return a < b ? -1 : (a == b ? 0 : 1)
        case (.double(let a), .double(let b)):
            if a.isNaN || b.isNaN { return nil }
            return a < b ? -1 : (a == b ? 0 : 1)
        case (.integer(let a), .double(let b)): return order(a, b)
        case (.double(let a), .integer(let b)): return order(b, a).map { -$0 }
        case (.string(let a), .string(let b)): return a < b ? -1 : (a == b ? 0 : 1)
        default: return nil
        }
    }

    /// Orders an integer against a double exactly, without rounding the integer to a double.
    private static func order(_ integer: Int64, _ double: Double) -> Int? {
        if double.isNaN { return nil }
        // 2^63 is exact in a double; everything at or beyond it lies outside Int64.
        if double >= 9_223_372_036_854_775_808.0 { return -1 }
        if double < -9_223_372_036_854_775_808.0 { return 1 }
        let whole = double.rounded(.towardZero)
        let truncated = Int64(whole)
        if integer != truncated { return integer < truncated ? -1 : 1 }
        let fraction = double - whole
        return fraction > 0 ? -1 : (fraction < 0 ? 1 : 0)
    }
}
