import DBusValues

/// A built-in function (docs/expressions.md, "Functions").
enum ExpressionFunction: String, Sendable, CaseIterable {
    case length, lower, upper, trim, string, int, double, bool, contains, startsWith, endsWith, min, max

    /// The list of names, for the unknown-function message.
    static let names = allCases.map(\.rawValue).joined(separator: ", ")

    /// The fewest arguments the function takes.
    var minimumArity: Int {
        switch self {
        case .contains, .startsWith, .endsWith, .min, .max: 2
        default: 1
        }
    }

    /// The most arguments the function takes, `nil` for no limit.
    var maximumArity: Int? {
        switch self {
        case .min, .max: nil
        default: minimumArity
        }
    }

    /// The arity message, e.g. "length() expects 1 argument, got 2".
    func arityMismatch(_ count: Int) -> String {
        let expected = switch (minimumArity, maximumArity) {
        case (1, 1): "1 argument"
        case (let low, let high?) where low == high: "\(low) arguments"
        default: "at least \(minimumArity) arguments"
        }
        return "\(rawValue)() expects \(expected), got \(count)"
    }

    /// The result kind for arguments of these kinds, or `nil` for a type error.
    func resultKind(_ arguments: [ExpressionKind]) -> ExpressionKind? {
        switch self {
        case .length:
            switch arguments[0] {
            case .string, .other(.array), .other(.dictionary): return .integer
            default: return nil
            }
        case .lower, .upper, .trim:
            return arguments[0] == .string ? .string : nil
        case .string:
            return .string
        case .int, .double:
            switch arguments[0] {
            case .integer, .double, .string, .boolean: return self == .int ? .integer : .double
            case .other: return nil
            }
        case .bool:
            switch arguments[0] {
            case .integer, .string, .boolean: return .boolean
            case .double, .other: return nil
            }
        case .contains:
            switch arguments[0] {
            case .string: return arguments[1] == .string ? .boolean : nil
            case .other(.array(let element)), .other(.dictionary(let element, _)):
                guard let elementKind = ExpressionKind(of: element) else { return .boolean }
                return ExpressionKind.areEquatable(elementKind, arguments[1]) ? .boolean : nil
            default: return nil
            }
        case .startsWith, .endsWith:
            return arguments[0] == .string && arguments[1] == .string ? .boolean : nil
        case .min, .max:
            var result = arguments[0]
            for argument in arguments.dropFirst() {
                guard ExpressionKind.areOrderable(result, argument) else { return nil }
                if argument != result { result = .double }
            }
            return result.isNumeric || result == .string ? result : nil
        }
    }

    /// The result kind whatever the arguments are, when the function has one.
    var fixedResultKind: ExpressionKind? {
        switch self {
        case .length, .int: .integer
        case .lower, .upper, .trim, .string: .string
        case .double: .double
        case .bool, .contains, .startsWith, .endsWith: .boolean
        case .min, .max: nil
        }
    }

    func mismatch(_ arguments: [ExpressionKind?]) -> String {
        let got = arguments.map(\.quoted).joined(separator: " and ")
        let expected = switch self {
        case .length: "a string, an array or a dict"
        case .lower, .upper, .trim: "a string"
        case .string: "any value"
        case .int, .double: "a number, a string or a boolean"
        case .bool: "an integer, a string or a boolean"
        case .contains: "a string and a substring, or an array or dict and an element of its type"
        case .startsWith, .endsWith: "two strings"
        case .min, .max: "numbers or strings"
        }
        return "\(rawValue)() expects \(expected), got \(got)"
    }
}
