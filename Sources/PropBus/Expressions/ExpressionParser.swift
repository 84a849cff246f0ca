/// A Pratt parser for the expression language.
///
/// Recursion is bounded: each nesting level costs two frames, and both the nesting of the
/// text and the height of the tree (which a long `1+1+…` chain grows without recursing) are
/// limited to ``Expression/maximumDepth``, so evaluation cannot blow the stack either.
struct ExpressionParser {
    private var lexer: ExpressionLexer
    private var token: ExpressionToken
    private var depth = 0
    private(set) var keys: Set<String> = []
    private(set) var usesValue = false

    private static let conditionalPrecedence = 1
    private static let unaryPrecedence = 8

    init(_ text: String) throws(PropBusError) {
        lexer = ExpressionLexer(text)
        token = try lexer.next()
    }

    /// Parses the whole text.
    mutating func parse() throws(PropBusError) -> ExpressionNode {
        let (node, _) = try expression(0)
        guard token.kind == .end else {
            throw fail(token.column, "expected an operator or end of input, found \(token.found)")
        }
        return node
    }

    private func fail(_ column: Int, _ message: String) -> PropBusError {
        PropBusError(.invalidExpression, "column \(column): \(message)")
    }

    private mutating func advance() throws(PropBusError) {
        token = try lexer.next()
    }

    private func checked(height: Int, at column: Int) throws(PropBusError) -> Int {
        guard height <= Expression.maximumDepth else {
            throw fail(column, "the expression nests deeper than \(Expression.maximumDepth) levels")
        }
        return height
    }

    /// An expression whose operators all bind at least as tightly as `minimumPrecedence`,
    /// with the height of its tree.
    private mutating func expression(_ minimumPrecedence: Int) throws(PropBusError) -> (ExpressionNode, Int) {
        depth += 1
        defer { depth -= 1 }
        guard depth <= Expression.maximumDepth else {
            throw fail(token.column, "the expression nests deeper than \(Expression.maximumDepth) levels")
        }
        var (left, height) = try prefix()
        while true {
            if case .symbol(let symbol) = token.kind, let op = BinaryOperator(rawValue: symbol), op.precedence >= minimumPrecedence {
                let column = token.column
                try advance()
                // precedence + 1: every binary operator is left-associative.
                let (right, rightHeight) = try expression(op.precedence + 1)
                left = .binary(op, left, right, column: column)
                height = try checked(height: Swift.max(height, rightHeight) + 1, at: column)
            } else if token.isSymbol("?") && Self.conditionalPrecedence >= minimumPrecedence {
                let column = token.column
                try advance()
                let (then, thenHeight) = try expression(0)
                guard token.isSymbol(":") else {
                    throw fail(token.column, "expected ':' for the '?' at column \(column), found \(token.found)")
                }
                try advance()
                // The same precedence again: ?: is right-associative.
                let (otherwise, otherwiseHeight) = try expression(Self.conditionalPrecedence)
                left = .conditional(left, then, otherwise, column: column)
                height = try checked(height: Swift.max(height, thenHeight, otherwiseHeight) + 1, at: column)
            } else {
                return (left, height)
            }
        }
    }

    private mutating func prefix() throws(PropBusError) -> (ExpressionNode, Int) {
        let start = token
        switch start.kind {
        case .symbol("!"), .symbol("-"):
            try advance()
            let op: UnaryOperator = start.isSymbol("!") ? .not : .negate
            if op == .negate, case .integer(let digits) = token.kind {
                // Folded so that the most negative integer, whose magnitude is out of range, parses.
                let literal = try integer("-" + digits, column: start.column)
                try advance()
                return (.literal(.integer(literal)), 1)
            }
            let (operand, height) = try expression(Self.unaryPrecedence)
            return (.unary(op, operand, column: start.column), try checked(height: height + 1, at: start.column))
        case .symbol("("):
            try advance()
            let inner = try expression(0)
            guard token.isSymbol(")") else {
                throw fail(token.column, "expected ')' to close the '(' at column \(start.column), found \(token.found)")
            }
            try advance()
            return inner
        case .integer(let digits):
            let literal = try integer(digits, column: start.column)
            try advance()
            return (.literal(.integer(literal)), 1)
        case .number(let value, _):
            try advance()
            return (.literal(.double(value)), 1)
        case .string(let text):
            try advance()
            return (.literal(.string(text)), 1)
        case .word(let word):
            try advance()
            if token.isSymbol("(") { return try call(word, column: start.column) }
            switch word {
            case "true": return (.literal(.boolean(true)), 1)
            case "false": return (.literal(.boolean(false)), 1)
            case "value":
                usesValue = true
                return (.value(column: start.column), 1)
            default:
                // The lexer has validated every dotted word as a key.
                guard word.contains(".") else {
                    throw fail(start.column, "unknown name '\(word)': a key is group.name, and 'value' is the incoming value")
                }
                keys.insert(word)
                return (.key(word, column: start.column), 1)
            }
        default:
            throw fail(start.column, "expected a value, a key, a function call or '(', found \(start.found)")
        }
    }

    private func integer(_ text: String, column: Int) throws(PropBusError) -> Int64 {
        guard let value = Int64(text) else {
            throw fail(column, "integer \(ExpressionLexer.abbreviated(text)) is out of range \(Int64.min)...\(Int64.max)")
        }
        return value
    }

    /// A function call; the current token is its '('.
    private mutating func call(_ name: String, column: Int) throws(PropBusError) -> (ExpressionNode, Int) {
        guard let function = ExpressionFunction(rawValue: name) else {
            throw fail(column, "unknown function '\(ExpressionLexer.abbreviated(name))'; the functions are \(ExpressionFunction.names)")
        }
        try advance()
        var arguments: [ExpressionNode] = []
        var height = 0
        if token.isSymbol(")") {
            try advance()
        } else {
            while true {
                let (argument, argumentHeight) = try expression(0)
                arguments.append(argument)
                height = Swift.max(height, argumentHeight)
                if token.isSymbol(",") {
                    try advance()
                } else if token.isSymbol(")") {
                    try advance()
                    break
                } else {
                    throw fail(token.column, "expected ',' or ')' after an argument of \(name), found \(token.found)")
                }
            }
        }
        guard arguments.count >= function.minimumArity, arguments.count <= function.maximumArity ?? Int.max else {
            throw fail(column, function.arityMismatch(arguments.count))
        }
        return (.call(function, arguments, column: column), try checked(height: height + 1, at: column))
    }
}
