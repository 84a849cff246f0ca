import DBus

/// Finds the kind of an expression's result without evaluating it, and the type errors that
/// every evaluation would hit.
///
/// It never reports an error that some evaluation could avoid: an unknown kind (a `v`, an
/// unknown key) stands for every kind it might be. Both branches of `?:` and both sides of
/// `&&`/`||` are checked, since a branch that can never type-check is a mistake either way.
struct ExpressionTypeChecker {
    let valueType: DBusType?
    let keyType: (String) -> DBusType?

    private func fail(_ column: Int, _ message: String) -> PropBusError {
        PropBusError(.invalidExpression, "column \(column): \(message)")
    }

    /// The kind of `node`'s result, `nil` when unknown.
    func kind(of node: ExpressionNode) throws(PropBusError) -> ExpressionKind? {
        switch node {
        case .literal(let operand):
            return operand.kind
        case .value:
            return valueType.flatMap(ExpressionKind.init(of:))
        case .key(let key, _):
            return keyType(key).flatMap(ExpressionKind.init(of:))
        case .unary(let op, let operand, let column):
            guard let kind = try self.kind(of: operand) else {
                return op == .not ? .boolean : nil
            }
            guard let result = op.resultKind(kind) else { throw fail(column, op.mismatch(kind)) }
            return result
        case .binary(let op, let lhs, let rhs, let column):
            let left = try kind(of: lhs)
            let right = try kind(of: rhs)
            switch op.resultKind(possiblyUnknown: left, right) {
            case .success(let kind): return kind
            case .failure(let mismatch): throw fail(column, mismatch.message)
            }
        case .conditional(let condition, let then, let otherwise, let column):
            if let kind = try kind(of: condition), kind != .boolean {
                throw fail(column, "the condition of '?:' must be 'boolean', got \(kind.quoted)")
            }
            let thenKind = try kind(of: then)
            let otherwiseKind = try kind(of: otherwise)
            return thenKind == otherwiseKind ? thenKind : nil
        case .call(let function, let arguments, let column):
            var kinds: [ExpressionKind?] = []
            for argument in arguments { kinds.append(try kind(of: argument)) }
            let known = kinds.compactMap { $0 }
            guard known.count == kinds.count else { return function.fixedResultKind }
            guard let result = function.resultKind(known) else { throw fail(column, function.mismatch(kinds)) }
            return result
        }
    }
}
