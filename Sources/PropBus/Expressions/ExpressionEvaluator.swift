import DBusValues

/// Evaluates a parsed expression. Its recursion is as deep as the tree, which the parser
/// bounds; its work and the size of what it builds are bounded by `budget`.
struct ExpressionEvaluator {
    let value: DBusValue?
    let lookup: (String) -> DBusValue?
    var budget: EvaluationBudget

    private func fail(_ message: String) -> PropBusError {
        PropBusError(.transformFailed, message)
    }

    mutating func evaluate(_ node: ExpressionNode) throws(PropBusError) -> ExpressionOperand {
        try budget.spend(1)
        switch node {
        case .literal(let operand):
            return operand
        case .value:
            guard let value else { throw fail("'value' is not available here: there is no incoming value") }
            return try ExpressionOperand(reading: value)
        case .key(let key, _):
            guard let found = lookup(key) else { throw fail("unknown key \(key)") }
            return try ExpressionOperand(reading: found)
        case .unary(let op, let operandNode, _):
            let operand = try evaluate(operandNode)
            switch (op, operand) {
            case (.not, .boolean(let b)): return .boolean(!b)
            case (.negate, .integer(let v)):
                guard v != .min else { throw fail("-(\(v)) overflows a 64-bit integer") }
                return .integer(-v)
            case (.negate, .double(let v)): return .double(-v)
            default: throw fail(op.mismatch(operand.kind))
            }
        case .binary(let op, let lhs, let rhs, _):
            return try binary(op, lhs, rhs)
        case .conditional(let conditionNode, let then, let otherwise, _):
            let condition = try evaluate(conditionNode)
            guard case .boolean(let holds) = condition else {
                throw fail("the condition of '?:' must be 'boolean', got \(condition.kind.quoted)")
            }
            return try evaluate(holds ? then : otherwise)
        case .call(let function, let argumentNodes, _):
            var arguments: [ExpressionOperand] = []
            for node in argumentNodes { arguments.append(try evaluate(node)) }
            return try call(function, arguments)
        }
    }

    private mutating func binary(_ op: BinaryOperator, _ lhsNode: ExpressionNode, _ rhsNode: ExpressionNode) throws(PropBusError) -> ExpressionOperand {
        let lhs = try evaluate(lhsNode)
        if op == .and || op == .or {
            guard case .boolean(let left) = lhs else { throw fail(op.mismatch(lhs.kind, .boolean)) }
            // Short-circuit: the right side is not evaluated, so its errors cannot happen.
            if left == (op == .or) { return .boolean(left) }
            let rhs = try evaluate(rhsNode)
            guard case .boolean(let right) = rhs else { throw fail(op.mismatch(.boolean, rhs.kind)) }
            return .boolean(right)
        }
        let rhs = try evaluate(rhsNode)
        guard op.resultKind(lhs.kind, rhs.kind) != nil else { throw fail(op.mismatch(lhs.kind, rhs.kind)) }
        switch op {
        case .equal, .notEqual:
            try spendReading(lhs, rhs)
            let equal = ExpressionOperand.areEqual(lhs, rhs) ?? false
            return .boolean(equal == (op == .equal))
        case .less, .lessOrEqual, .greater, .greaterOrEqual:
            try spendReading(lhs, rhs)
            // NaN is unordered: every ordering comparison with it is false.
            guard let order = ExpressionOperand.order(lhs, rhs) else { return .boolean(false) }
            switch op {
            case .less: return .boolean(order < 0)
            case .lessOrEqual: return .boolean(order <= 0)
            case .greater: return .boolean(order > 0)
            default: return .boolean(order >= 0)
            }
        default:
            return try arithmetic(op, lhs, rhs)
        }
    }

    private mutating func arithmetic(_ op: BinaryOperator, _ lhs: ExpressionOperand, _ rhs: ExpressionOperand) throws(PropBusError) -> ExpressionOperand {
        if case .string(let a) = lhs, case .string(let b) = rhs {
            // Sized before it is built: the bomb is the building.
            let size = a.utf8.count + b.utf8.count
            try budget.admit(stringOf: size)
            try budget.spend(size)
            return .string(a + b)
        }
        if case .integer(let a) = lhs, case .integer(let b) = rhs {
            let (result, overflow): (Int64, Bool)
            switch op {
            case .add: (result, overflow) = a.addingReportingOverflow(b)
            case .subtract: (result, overflow) = a.subtractingReportingOverflow(b)
            case .multiply: (result, overflow) = a.multipliedReportingOverflow(by: b)
            case .divide, .remainder:
                guard b != 0 else { throw fail("division by zero in \(a) \(op.rawValue) \(b)") }
                (result, overflow) = op == .divide ? a.dividedReportingOverflow(by: b) : a.remainderReportingOverflow(dividingBy: b)
            default: preconditionFailure("not arithmetic: \(op)")
            }
            guard !overflow else { throw fail("\(a) \(op.rawValue) \(b) overflows a 64-bit integer") }
            return .integer(result)
        }
        guard let a = lhs.doubleValue, let b = rhs.doubleValue else { throw fail(op.mismatch(lhs.kind, rhs.kind)) }
        switch op {
        case .add: return .double(a + b)
        case .subtract: return .double(a - b)
        case .multiply: return .double(a * b)
        case .divide, .remainder:
            guard b != 0 else { throw fail("division by zero in \(a) \(op.rawValue) \(b)") }
            return .double(op == .divide ? a / b : a.truncatingRemainder(dividingBy: b))
        default: preconditionFailure("not arithmetic: \(op)")
        }
    }

    /// Charges the bytes a comparison or function may read from its string operands.
    private mutating func spendReading(_ operands: ExpressionOperand...) throws(PropBusError) {
        for case .string(let s) in operands { try budget.spend(s.utf8.count) }
    }

    /// Charges one comparison with `operand`: the bytes an equality may read from it.
    private mutating func spendComparing(_ operand: ExpressionOperand) throws(PropBusError) {
        switch operand {
        case .string(let s): try budget.spend(1 + s.utf8.count)
        case .other(let value): try budget.spend(1 + value.wireSize())
        default: try budget.spend(1)
        }
    }

    /// Checks and charges a string a function built (its size is known only afterwards).
    private mutating func built(_ s: String) throws(PropBusError) -> ExpressionOperand {
        try budget.admit(stringOf: s.utf8.count)
        try budget.spend(s.utf8.count)
        return .string(s)
    }

    private mutating func call(_ function: ExpressionFunction, _ arguments: [ExpressionOperand]) throws(PropBusError) -> ExpressionOperand {
        guard function.resultKind(arguments.map(\.kind)) != nil else {
            throw fail(function.mismatch(arguments.map(\.kind)))
        }
        for argument in arguments { try spendReading(argument) }
        let first = arguments[0]
        switch function {
        case .length:
            switch first {
            case .string(let s): return .integer(Int64(s.count))
            case .other(.array(_, let items)): return .integer(Int64(items.count))
            case .other(.bytes(let bytes)): return .integer(Int64(bytes.count))
            case .other(.dictionary(_, _, let entries)): return .integer(Int64(entries.count))
            default: break
            }
        case .lower, .upper, .trim:
            guard case .string(let s) = first else { break }
            switch function {
            case .lower: return try built(s.lowercased())
            case .upper: return try built(s.uppercased())
            default: return .string(s.trimmedForExpression)
            }
        case .string:
            switch first {
            case .string(let s): return .string(s)
            default:
                // A container's text can be several times its wire size.
                try budget.spend(first.dbusValue.wireSize())
                return try built(ValueText.format(first.dbusValue))
            }
        case .int:
            return .integer(try integer(from: first))
        case .double:
            return .double(try double(from: first))
        case .bool:
            return .boolean(try boolean(from: first))
        case .contains:
            return .boolean(try contains(first, arguments[1]))
        case .startsWith, .endsWith:
            guard case .string(let s) = first, case .string(let affix) = arguments[1] else { break }
            return .boolean(function == .startsWith ? s.hasPrefix(affix) : s.hasSuffix(affix))
        case .min, .max:
            var best = first
            var sawDouble = first.kind == .double
            for candidate in arguments.dropFirst() {
                sawDouble = sawDouble || candidate.kind == .double
                guard let order = ExpressionOperand.order(candidate, best) else {
                    // NaN poisons the result, as it does in arithmetic.
                    best = .double(.nan)
                    continue
                }
                if (function == .min && order < 0) || (function == .max && order > 0) { best = candidate }
            }
            if sawDouble, case .integer(let v) = best { return .double(Double(v)) }
            return best
        }
        throw fail(function.mismatch(arguments.map(\.kind)))
    }

    private func integer(from operand: ExpressionOperand) throws(PropBusError) -> Int64 {
        switch operand {
        case .integer(let v):
            return v
        case .double(let v):
            guard v.isFinite, v >= -9_223_372_036_854_775_808.0, v < 9_223_372_036_854_775_808.0 else {
                throw fail("int() cannot convert \(v) to a 64-bit integer")
            }
            return Int64(v.rounded(.towardZero))
        case .string(let s):
            guard let v = Int64(s.trimmedForExpression) else {
                throw fail("int() cannot read \"\(ExpressionLexer.abbreviated(s))\" as an integer")
            }
            return v
        case .boolean(let b):
            return b ? 1 : 0
        case .other:
            throw fail(ExpressionFunction.int.mismatch([operand.kind]))
        }
    }

    private func double(from operand: ExpressionOperand) throws(PropBusError) -> Double {
        switch operand {
        case .integer(let v):
            return Double(v)
        case .double(let v):
            return v
        case .string(let s):
            guard let v = Double(s.trimmedForExpression) else {
                throw fail("double() cannot read \"\(ExpressionLexer.abbreviated(s))\" as a number")
            }
            return v
        case .boolean(let b):
            return b ? 1 : 0
        case .other:
            throw fail(ExpressionFunction.double.mismatch([operand.kind]))
        }
    }

    private static let trueWords: Set<String> = ["true", "1", "yes", "on"]
    private static let falseWords: Set<String> = ["false", "0", "no", "off"]

    private func boolean(from operand: ExpressionOperand) throws(PropBusError) -> Bool {
        switch operand {
        case .boolean(let b):
            return b
        case .integer(let v):
            guard v == 0 || v == 1 else { throw fail("bool() expects 0 or 1, got \(v)") }
            return v == 1
        case .string(let s):
            let word = s.trimmedForExpression.lowercased()
            if Self.trueWords.contains(word) { return true }
            if Self.falseWords.contains(word) { return false }
            throw fail("bool() cannot read \"\(ExpressionLexer.abbreviated(s))\" as a boolean; it takes true/false, 1/0, yes/no, on/off")
        default:
            throw fail(ExpressionFunction.bool.mismatch([operand.kind]))
        }
    }

    /// Whether `needle` occurs in `haystack`, element by element; `compared` is told of each
    /// comparison before it is made, so a caller can charge it and stop the search.
    ///
    /// Knuth–Morris–Pratt: at most 2 × (haystack + needle) comparisons whatever the input. The
    /// standard library's search took minutes on a 1 MiB value for some 4 KiB needles (a needle
    /// that nearly matches at every position), on the daemon's only queue.
    static func contains<Haystack: Sequence, Needle: Collection>(
        _ haystack: Haystack, _ needle: Needle,
        compared: (Haystack.Element, Haystack.Element) throws(PropBusError) -> Void
    ) throws(PropBusError) -> Bool where Haystack.Element: Equatable, Needle.Element == Haystack.Element {
        let pattern = Array(needle)
        guard !pattern.isEmpty else { return true }
        // fallback[i]: the longest proper prefix of pattern[0...i] that is also its suffix.
        var fallback = [Int](repeating: 0, count: pattern.count)
        var matched = 0
        for index in pattern.indices.dropFirst() {
            while true {
                try compared(pattern[index], pattern[matched])
                if pattern[index] == pattern[matched] { matched += 1; break }
                if matched == 0 { break }
                matched = fallback[matched - 1]
            }
            fallback[index] = matched
        }
        matched = 0
        for element in haystack {
            while true {
                try compared(element, pattern[matched])
                if element == pattern[matched] { matched += 1; break }
                if matched == 0 { break }
                matched = fallback[matched - 1]
            }
            if matched == pattern.count { return true }
        }
        return false
    }

    /// What a substring search compares: the string's UTF-8 in normalization form C, so that
    /// canonically equivalent text matches (as the standard library's `contains` answers: "é"
    /// precomposed is found in "é" decomposed, "\r" in "\r\n"); valid UTF-8 can only match
    /// at scalar boundaries.
    ///
    /// Text already in NFC (all ASCII, and most text) is copied as it is; other text must be
    /// composed, which costs about 30 times a byte copy per byte (95 ms for a decomposed 1 MB
    /// value): `normalizing` is told the bytes before that is done, to charge it.
    static func searchUnits(of text: String, normalizing: (Int) throws(PropBusError) -> Void) throws(PropBusError) -> [UInt8] {
        var span = text.utf8Span
        if span.checkForNFC(quickCheck: true) { return Array(text.utf8) }
        try normalizing(text.utf8.count)
        return text._nfcCodeUnits
    }

    /// The units charged per byte of text a search must bring to NFC first.
    static let normalizingCost = 32

    private mutating func contains(_ haystack: ExpressionOperand, _ needle: ExpressionOperand) throws(PropBusError) -> Bool {
        let candidates: [DBusValue]
        switch haystack {
        case .string(let s):
            guard case .string(let sub) = needle, !sub.isEmpty else { return false }
            let charge = { (bytes: Int) throws(PropBusError) in try budget.spend(Self.normalizingCost * bytes) }
            return try Self.contains(Self.searchUnits(of: s, normalizing: charge), Self.searchUnits(of: sub, normalizing: charge)) {
                _, _ throws(PropBusError) in try budget.spend(1)
            }
        case .other(.array(_, let items)): candidates = items
        case .other(.bytes(let bytes)): candidates = bytes.map { .byte($0) }
        case .other(.dictionary(_, _, let entries)): candidates = entries.map(\.key)
        default: return false
        }
        for candidate in candidates {
            let element = try ExpressionOperand(reading: candidate)
            try spendComparing(element)
            // Elements of another kind (in an array of variants) are simply not equal.
            if ExpressionOperand.areEqual(element, needle) == true { return true }
        }
        return false
    }
}

extension String {
    /// The string without leading and trailing whitespace and newlines.
    fileprivate var trimmedForExpression: String {
        let scalars = unicodeScalars
        guard let start = scalars.firstIndex(where: { !$0.properties.isWhitespace }) else { return "" }
        let end = scalars.lastIndex(where: { !$0.properties.isWhitespace })!
        return String(scalars[start...end])
    }
}
