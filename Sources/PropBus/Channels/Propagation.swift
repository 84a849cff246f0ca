import DBusValues

/// Spreads a change through the bindings until it settles.
///
/// The rule that makes channels correct: a propagated value is compared with the *current value
/// of the other side* (including what this same propagation already assigned), never with a
/// remembered last value, so nothing can go stale, and a write that changes nothing produces no
/// further writes (no echo). Each key is assigned at most once per propagation and the keys the
/// change started from are never assigned, so chains and cycles settle in one pass and
/// terminate even with transforms that are not inverses of each other.
struct Propagation {
    let bindings: BindingTable
    /// The value a key has before this change (the model's current value).
    let currentValue: (Key) -> DBusValue?
    /// The type of a registered key.
    let type: (Key) -> DBusType?
    /// The largest value (`--max-value-size`): no transform may build a string past it.
    var maximumSize = 1 << 20
    /// Whether a key is secret: a failure that saw its value does not describe the value.
    var isSecret: (Key) -> Bool = { _ in false }
    /// Whether a binding may act now, with its principal's rights of the moment (`nil`: every
    /// binding may); one that may not is passed over, as if it were not there.
    var mayAct: ((Binding) -> Bool)?

    /// Returns the extra assignments the bindings make when `assignments` happen.
    ///
    /// - Parameter held: keys held, which it must not write (the origins, and at bind time the
    ///   leading side).
    func expand(_ assignments: [(Key, DBusValue)], holding held: Set<Key> = []) throws(PropBusError) -> [(Key, DBusValue)] {
        var pending: [Key: DBusValue] = [:]
        var visited = held
        let origins = Set(assignments.map(\.0))
        for (key, value) in assignments {
            pending[key] = value
            visited.insert(key)
        }
        var work = assignments
        var result: [(Key, DBusValue)] = []
        // One budget for the whole spread: a chain of bindings is bounded as one transform is.
        var budget = EvaluationBudget(maximumSize: maximumSize)
        var index = 0
        while index < work.count {
            let (key, value) = work[index]
            index += 1
            for binding in bindings.touching(key) {
                let target: Key
                let transform: Expression?
                if binding.key == key && binding.to != key {
                    guard binding.flowsToTarget else { continue }
                    (target, transform) = (binding.to, binding.toTarget)
                } else if binding.to == key {
                    guard binding.flowsToKey else { continue }
                    (target, transform) = (binding.key, binding.toKey)
                } else {
                    continue
                }
                // A binding loaded from the store may wait for a key a model file declares later.
                guard type(target) != nil else { continue }
                // Checked as the binding acts: its principal may have lost a right since Bind.
                if let mayAct, !mayAct(binding) { continue }
                if visited.contains(target) {
                    // Two keys set in one call must not leave a binding between them disagreeing.
                    if origins.contains(target), origins.contains(key), key != target,
                       let mapped = try? map(value, through: transform, into: target, binding: binding, pending: pending, budget: &budget),
                       mapped != pending[target] {
                        throw PropBusError(.invalidValue, "the values given for \(key) and \(target) disagree through binding \(binding.id) (\(binding.key) ↔ \(binding.to)); set one side only")
                    }
                    continue
                }
                let mapped = try map(value, through: transform, into: target, binding: binding, pending: pending, budget: &budget)
                let current = pending[target] ?? currentValue(target)
                if mapped == current { continue }
                visited.insert(target)
                pending[target] = mapped
                result.append((target, mapped))
                work.append((target, mapped))
            }
        }
        return result
    }

    /// Applies a transform and converts the result to the target's type.
    func map(_ value: DBusValue, through transform: Expression?, into target: Key, binding: Binding,
             pending: [Key: DBusValue] = [:]) throws(PropBusError) -> DBusValue {
        var budget = EvaluationBudget(maximumSize: maximumSize)
        return try map(value, through: transform, into: target, binding: binding, pending: pending, budget: &budget)
    }

    /// ``map(_:through:into:binding:pending:)`` spending a budget shared with other transforms.
    func map(_ value: DBusValue, through transform: Expression?, into target: Key, binding: Binding,
             pending: [Key: DBusValue], budget: inout EvaluationBudget) throws(PropBusError) -> DBusValue {
        guard let targetType = type(target) else {
            throw PropBusError(.unknownKey, "binding \(binding.id) targets \(target), which does not exist")
        }
        var result = value
        if let transform {
            do {
                result = try transform.evaluate(value: value, budget: &budget) { name in
                    guard let key = try? Key(name) else { return nil }
                    return pending[key] ?? currentValue(key)
                }
            } catch {
                // A limit stays a limit: the caller can tell "too big" from "cannot map".
                throw PropBusError(error.code == .limitsExceeded ? .limitsExceeded : .transformFailed, "binding \(binding.id) (\(binding.key) ↔ \(binding.to)) cannot map the value for \(target): \(error.code == .limitsExceeded ? error.message : reason(error, transform: transform, binding: binding, type: targetType))")
            }
        }
        if result.type == targetType { return result }
        do {
            return try Expression.convert(result, to: targetType)
        } catch {
            throw PropBusError(.transformFailed, "binding \(binding.id) (\(binding.key) ↔ \(binding.to)) cannot map the value for \(target): \(reason(error, transform: transform, binding: binding, type: targetType))")
        }
    }

    /// Why a value could not be mapped; "value refused" when a secret key is involved (a side or
    /// a key the transform reads): conversion errors quote the value, and this one may reach a
    /// log, a model file's problems or a caller who may not read the key.
    private func reason(_ error: PropBusError, transform: Expression?, binding: Binding, type: DBusType) -> String {
        let involved = [binding.key, binding.to] + (transform?.referencedKeys.compactMap { try? Key($0) } ?? [])
        guard involved.contains(where: isSecret) else { return error.message }
        return "value refused (a secret key is involved): the transform or the conversion to '\(type.signature)' failed"
    }
}
