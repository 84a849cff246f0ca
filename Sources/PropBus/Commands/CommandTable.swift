import DBusValues

/// The daemon's commands (docs/commands.md): definitions, running executions and registered handlers,
/// with `Enabled`, `Executing` and `Executions` kept as read-only keys of the model.
///
/// This is RACCommand's bookkeeping without the work itself: the service runs processes and
/// calls handlers, and reports back through ``finish(_:of:)``. Every state change goes through
/// the model, so state keys can be read, watched, bound and used in expressions like any key.
///
/// Single owner, like the model: confined to the service's queue.
public final class CommandTable {
    /// One accepted execution.
    public struct Execution: Sendable, Hashable {
        public let id: UInt64
        public let command: Key
        public let input: DBusValue
        /// The uid of the caller of `Execute` or `Start`, charged with it; `nil` when unknown.
        public var principal: UInt32? = nil
        /// The input's marshalled size, charged to ``principal`` (``Quota/inputBytes``) while it runs.
        public var inputSize: Int = 0
    }

    /// A command's current state.
    public struct State: Sendable, Equatable {
        public var enabled: Bool
        public var executing: Bool
        public var executions: UInt32
    }

    fileprivate struct Command {
        var definition: CommandDefinition
        /// Running executions, by id (ids grow, so sorting gives acceptance order).
        var running: [UInt64: Execution] = [:]
        /// The unique bus name of the registered handler, for `handler` commands.
        var handler: String?
        var enabled = false
    }

    private let model: PropertyModel
    private var commands: [Key: Command] = [:]
    /// Commands whose predicate reads a key, by key text.
    private var readers: [String: Set<Key>] = [:]
    private var nextExecutionID: UInt64 = 1
    /// Commands as they were at the last commit, once the round changed a definition.
    private var definitionsAtCommit: [Key: CommandDefinition]?
    /// The most executions running at once across all commands (`--max-executions`).
    public let maximumRunning: Int
    /// The quota of each uid (``Quota/executions``, ``Quota/inputBytes``, ``Quota/commands``);
    /// none unless the daemon checks callers.
    public var quotas = Quotas.off

    /// The table of `model`'s commands; what it stores goes into the model's round
    /// (``PropertyModel/storeChanges``).
    public init(model: PropertyModel, maximumRunning: Int = 64) {
        self.model = model
        self.maximumRunning = maximumRunning
        // A command's key and group hold only its state. Weak: the table holds the model.
        model.creationCheck = { [weak self] key throws(PropBusError) in
            guard let self, let command = commands.keys.first(where: { $0.text == key.group || $0 == key }) else { return }
            throw PropBusError(.exists, "cannot create \(key): \(command) is a command, and its group holds only the command's state (\(CommandDefinition.stateNames.joined(separator: ", ")))")
        }
    }

    // MARK: Reading

    /// Every command's definition, sorted by key.
    public var definitions: [CommandDefinition] { commands.values.map(\.definition).sorted { $0.key < $1.key } }

    /// The definition of the command `key`, if there is one.
    public func definition(of key: Key) -> CommandDefinition? { commands[key]?.definition }

    /// The current state of command `key`.
    public func state(of key: Key) -> State? {
        guard let command = commands[key] else { return nil }
        return State(enabled: command.enabled, executing: !command.running.isEmpty, executions: UInt32(command.running.count))
    }

    /// The registered handler of command `key`.
    public func handler(of key: Key) -> String? { commands[key]?.handler }

    /// A running execution.
    public func execution(_ id: UInt64, of key: Key) -> Execution? { commands[key]?.running[id] }

    /// The executions running now, in acceptance order.
    public func running(of key: Key) -> [Execution] {
        (commands[key]?.running.values.sorted { $0.id < $1.id }) ?? []
    }

    /// How many executions run now across all commands.
    public var runningCount: Int { commands.values.reduce(0) { $0 + $1.running.count } }

    /// What each uid holds here: the commands it created, its running executions and their
    /// input bytes. Counted when asked: commands are few (only privileged callers and the
    /// `propbus` group create them) and executions at most ``maximumRunning``.
    public var usage: UsageLedger {
        var ledger = UsageLedger()
        for command in commands.values {
            ledger.charge(.commands, to: command.definition.creator)
            for execution in command.running.values {
                ledger.charge(.executions, to: execution.principal)
                ledger.charge(.inputBytes, to: execution.principal, UInt64(execution.inputSize))
            }
        }
        return ledger
    }

    /// Parses a command key, with the same rules as property keys.
    public func command(_ keyText: String) throws(PropBusError) -> Key {
        let key = try Key(keyText)
        guard commands[key] != nil else { throw PropBusError(.unknownKey, "no command named \(keyText)") }
        return key
    }

    // MARK: Definitions

    /// Creates a command, or updates its definition if it exists (running executions go on).
    ///
    /// The `enabled_when` predicate must name existing keys and yield a boolean.
    ///
    /// - Parameter allowingMissingKeys: for a stored command at startup: a predicate that reads
    ///   a key which does not exist (now) leaves the command disabled until the key appears, as
    ///   deleting that key does while the daemon runs, instead of losing the command.
    ///
    /// - Parameter creator: the uid of the caller, charged with the command (``Quota/commands``)
    ///   and stored with it; a command created again keeps its first creator.
    public func create(key keyText: String, options: [String: DBusValue], creator: UInt32? = nil,
                       allowingMissingKeys: Bool = false) throws(PropBusError) -> [PropertyChange] {
        let key = try Key(keyText)
        var definition = try CommandDefinition(key: key, options: options)
        if let existing = commands[key]?.definition {
            definition.creator = existing.creator
        } else {
            definition.creator = creator
            if let creator {
                try quotas.check(.commands, uid: creator, using: usage.used(.commands, by: creator), "cannot create command \(key)")
            }
        }
        if let predicate = definition.enabledWhen {
            for name in predicate.referencedKeys.sorted() where !allowingMissingKeys {
                guard (try? model.entry(name)) != nil else {
                    throw PropBusError(.unknownKey, "option 'enabled_when' of command \(key) reads \(name), which does not exist")
                }
            }
            let type = try predicate.resultType(valueType: nil) { [model] name in (try? model.entry(name))?.definition.type }
            if let type, type != .boolean {
                throw PropBusError(.invalidExpression, "option 'enabled_when' of command \(key) must yield a boolean (b), but '\(predicate.text)' yields '\(type.signature)'")
            }
        }
        let previous = commands[key]
        if model.entry(for: key) != nil {
            throw PropBusError(.exists, "cannot create command \(key): a property with that key exists")
        }
        if previous == nil, !model.names(inGroup: key.text).isEmpty {
            throw PropBusError(.exists, "cannot create command \(key): the group \(key.text) holds properties (\(model.names(inGroup: key.text).joined(separator: ", ")))")
        }
        var changes: [PropertyChange] = []
        for (name, value) in [("Enabled", DBusValue.boolean(false)), ("Executing", .boolean(false)), ("Executions", .uint32(0))] {
            // A command created again keeps its state; ``update(_:)`` recomputes it.
            changes += model.addState(Key(uncheckedGroup: key.text, name: name), initialValue: value, of: key,
                                      description: "\(name) of command \(key)")
        }
        snapshot()
        if let old = previous?.definition.enabledWhen { unindex(key, old) }
        var command = previous ?? Command(definition: definition)
        command.definition = definition
        if definition.work != .handler { command.handler = nil }
        commands[key] = command
        if let predicate = definition.enabledWhen { for name in predicate.referencedKeys { readers[name, default: []].insert(key) } }
        if definition.persistent { model.storeChanges.saveCommand(key, options: definition.storedOptions) } else { model.storeChanges.removeCommand(key) }
        return changes + update(key)
    }

    /// Creates stored commands again at startup, in an order that works: a command whose
    /// predicate reads another command's state comes after it. Returns those that still fail.
    ///
    /// With `allowingMissingKeys` (stored commands at startup), those whose predicate reads a key
    /// that does not exist are created last, disabled (see ``create(key:options:allowingMissingKeys:)``).
    /// The creator each command was stored with comes back with it (``CommandDefinition/storedOptions``).
    public func recreate(_ stored: [(key: Key, options: [String: DBusValue])], allowingMissingKeys: Bool = false) -> [(key: Key, error: PropBusError)] {
        var pending = stored
        while true {
            var failed: [(key: Key, options: [String: DBusValue], error: PropBusError)] = []
            for (key, options) in pending {
                do { _ = try create(stored: key, options) } catch { failed.append((key, options, error)) }
            }
            // Stop when a pass makes no progress: what is left cannot be created.
            if failed.isEmpty || failed.count == pending.count {
                guard allowingMissingKeys else { return failed.map { ($0.key, $0.error) } }
                var left: [(key: Key, error: PropBusError)] = []
                for (key, options, _) in failed {
                    do { _ = try create(stored: key, options, allowingMissingKeys: true) } catch { left.append((key, error)) }
                }
                return left
            }
            pending = failed.map { ($0.key, $0.options) }
        }
    }

    /// A stored command, created again with its stored creator and no quota: it exists already.
    private func create(stored key: Key, _ options: [String: DBusValue], allowingMissingKeys: Bool = false) throws(PropBusError) -> [PropertyChange] {
        let (options, creator) = CommandDefinition.splittingCreator(options)
        let saved = quotas
        quotas = .off
        defer { quotas = saved }
        return try create(key: key.text, options: options, creator: creator, allowingMissingKeys: allowingMissingKeys)
    }

    /// Deletes a command and its state keys; returns its running executions, which the caller
    /// must stop and fail with `Cancelled`.
    public func delete(key keyText: String) throws(PropBusError) -> (ended: [Execution], changes: [PropertyChange]) {
        let key = try command(keyText)
        snapshot()
        let ended = running(of: key)
        let command = commands.removeValue(forKey: key)!
        if let predicate = command.definition.enabledWhen { unindex(key, predicate) }
        model.storeChanges.removeCommand(key)
        return (ended, model.removeGroup(key.text))
    }

    private func unindex(_ key: Key, _ predicate: Expression) {
        for name in predicate.referencedKeys {
            readers[name]?.remove(key)
            if readers[name]?.isEmpty == true { readers[name] = nil }
        }
    }

    // MARK: Executions

    /// Accepts an execution of an enabled command: from here on it is `Executing`.
    ///
    /// Throws `NotEnabled` (naming why) when the command is disabled, and `LimitsExceeded` when
    /// the input is larger than a value may be (`--max-value-size`: the daemon holds it while
    /// the execution runs), when the daemon already runs ``maximumRunning`` executions (the last
    /// ``Quotas/reservedExecutions(of:)`` of them kept for exempt callers), or when `principal`
    /// would go over its quota of executions or of input bytes. Nothing changes when it throws.
    public func accept(_ keyText: String, input: DBusValue, principal: UInt32? = nil) throws(PropBusError) -> (execution: Execution, changes: [PropertyChange]) {
        let key = try command(keyText)
        let command = commands[key]!
        let inputSize = input.wireSize()
        guard inputSize <= model.limits.maximumValueSize else {
            throw PropBusError(.limitsExceeded, "cannot execute \(key): its input is \(inputSize) bytes, more than the \(model.limits.maximumValueSize)-byte limit of a value (--max-value-size)")
        }
        guard command.enabled else {
            throw PropBusError(.notEnabled, "command \(key) is not enabled (\(disabledReason(command)))")
        }
        let count = runningCount
        guard count < maximumRunning else {
            throw PropBusError(.limitsExceeded, "cannot execute \(key): the daemon already runs the maximum of \(maximumRunning) executions")
        }
        if !quotas.mayUseReserve(principal) {
            let reserved = Quotas.reservedExecutions(of: maximumRunning)
            guard count < maximumRunning - reserved else {
                throw PropBusError(.limitsExceeded, "cannot execute \(key): \(count) of the \(maximumRunning) executions the daemon runs at most (--max-executions) run now, and the last \(reserved) are kept for root and the daemon's user, not for uid \(principal.map(String.init) ?? "unknown")")
            }
        }
        if let principal, !quotas.isExempt(principal) {
            let held = usage.usage(of: principal)
            try quotas.check(.executions, uid: principal, using: held[.executions] ?? 0, "cannot execute \(key)")
            try quotas.check(.inputBytes, uid: principal, using: held[.inputBytes] ?? 0, adding: UInt64(inputSize), "cannot execute \(key)")
        }
        let execution = Execution(id: nextExecutionID, command: key, input: input, principal: principal, inputSize: inputSize)
        nextExecutionID += 1
        commands[key]!.running[execution.id] = execution
        return (execution, update(key))
    }

    /// Ends an execution (whatever its outcome); returns the state changes, or nothing when it
    /// had already ended.
    public func finish(_ id: UInt64, of key: Key) -> [PropertyChange] {
        guard commands[key]?.running.removeValue(forKey: id) != nil else { return [] }
        return update(key)
    }

    private func disabledReason(_ command: Command) -> String {
        var reasons: [String] = []
        if let denial = readDenial(command.definition) {
            reasons.append("enabled_when reads what its creator may not: \(denial)")
        } else if let predicate = command.definition.enabledWhen, !holds(predicate) {
            reasons.append("enabled_when '\(predicate.text)' is false")
        }
        if !command.definition.concurrent, !command.running.isEmpty { reasons.append("it is executing and does not allow concurrent execution") }
        if command.definition.needsHandler, command.handler == nil { reasons.append("no handler is registered") }
        return reasons.isEmpty ? "disabled" : reasons.joined(separator: "; ")
    }

    // MARK: Handlers

    /// Makes `owner` (a unique bus name) the handler of command `key`.
    public func registerHandler(_ keyText: String, owner: String) throws(PropBusError) -> [PropertyChange] {
        let key = try command(keyText)
        guard commands[key]!.definition.needsHandler else {
            throw PropBusError(.invalidArgs, "command \(key) runs its 'exec' argv; only commands created with handler=true take a handler")
        }
        if let current = commands[key]!.handler, current != owner {
            throw PropBusError(.exists, "command \(key) already has a handler (\(current))")
        }
        commands[key]!.handler = owner
        return update(key)
    }

    /// Removes `owner` as handler of command `key`; its running executions are returned to fail.
    public func unregisterHandler(_ keyText: String, owner: String) throws(PropBusError) -> (ended: [Execution], changes: [PropertyChange]) {
        let key = try command(keyText)
        guard commands[key]!.handler == owner else {
            throw PropBusError(.invalidArgs, "this connection is not the handler of command \(key)")
        }
        return dropHandler(key)
    }

    /// `owner` left the bus: every command it handled loses its handler, and their running
    /// executions are returned, to fail with `HandlerVanished`.
    public func handlerLeft(_ owner: String) -> (ended: [Execution], changes: [PropertyChange]) {
        var ended: [Execution] = []
        var changes: [PropertyChange] = []
        for key in commands.keys.sorted() where commands[key]!.handler == owner {
            let dropped = dropHandler(key)
            ended += dropped.ended
            changes += dropped.changes
        }
        return (ended, changes)
    }

    private func dropHandler(_ key: Key) -> (ended: [Execution], changes: [PropertyChange]) {
        let ended = running(of: key)
        commands[key]!.handler = nil
        commands[key]!.running = [:]
        return (ended, update(key))
    }

    // MARK: State

    /// Recomputes `Enabled` of the commands whose predicate reads a key that `changes` touched;
    /// returns the state changes, which may in turn touch predicates (bounded, so two commands
    /// whose predicates read each other's `Enabled` cannot loop forever).
    public func refresh(after changes: [PropertyChange]) -> [PropertyChange] {
        guard !readers.isEmpty else { return [] }
        var result: [PropertyChange] = []
        var pending = changes
        for _ in 0..<16 {
            var affected: Set<Key> = []
            for change in pending {
                switch change {
                // A redefinition may change who may read the key (made secret, new writers).
                case .valueChanged(let key, _), .created(let key), .deleted(let key, _), .redefined(let key):
                    affected.formUnion(readers[key.text] ?? [])
                case .bound, .unbound:
                    continue
                }
            }
            if affected.isEmpty { break }
            pending = affected.sorted().flatMap { update($0) }
            result += pending
        }
        return result
    }

    /// Brings every state key in line with the commands, e.g. after the model rolled back.
    public func reassertState() -> [PropertyChange] {
        commands.keys.sorted().flatMap(update)
    }

    /// Whether a command may run now: its `enabled` predicate holds and, for a serial command, no
    /// execution of it runs.
    private func isEnabled(_ command: Command) -> Bool {
        let predicate = command.definition.enabledWhen.map { readDenial(command.definition) == nil && holds($0) } ?? true
        return predicate && (command.definition.concurrent || command.running.isEmpty)
            && (!command.definition.needsHandler || command.handler != nil)
    }

    /// Recomputes one command's state and writes what changed to its state keys.
    private func update(_ key: Key) -> [PropertyChange] {
        guard var command = commands[key] else { return [] }
        command.enabled = isEnabled(command)
        commands[key] = command
        let group = key.text
        return model.setState(Key(uncheckedGroup: group, name: "Enabled"), to: .boolean(command.enabled))
            + model.setState(Key(uncheckedGroup: group, name: "Executing"), to: .boolean(!command.running.isEmpty))
            + model.setState(Key(uncheckedGroup: group, name: "Executions"), to: .uint32(UInt32(command.running.count)))
    }

    /// Why the creator of `definition` may not read a key its predicate names, checked now (a
    /// key made secret after `CreateCommand`, or writers narrowed since): `Enabled` is public,
    /// and would tell everyone a bit of it. `nil` when it may, and for the daemon's own commands.
    private func readDenial(_ definition: CommandDefinition) -> String? {
        guard let authority = model.bindingAuthority, let principal = definition.creator,
              let predicate = definition.enabledWhen, !authority.isExempt(principal) else { return nil }
        let uses = predicate.referencedKeys.sorted().compactMap { name -> BindingAuthority.Use? in
            guard let key = try? Key(name), let entry = model.entry(for: key) else { return nil }
            return BindingAuthority.Use(entry.definition, .read)
        }
        return authority.denial(principal, uses)
    }

    /// Whether a predicate holds now; one that cannot be evaluated (a key it reads was deleted,
    /// a value it cannot convert) does not.
    private func holds(_ predicate: Expression) -> Bool {
        var budget = EvaluationBudget(maximumSize: model.limits.maximumValueSize)
        let value = try? predicate.evaluate(value: nil, budget: &budget) { [model] name in try? model.value(of: name) }
        return value?.boolValue ?? false
    }

    // MARK: Rounds

    private func snapshot() {
        if definitionsAtCommit == nil { definitionsAtCommit = commands.mapValues(\.definition) }
    }

    /// The definitions as they are now, inside the round: one model file of a reload, which
    /// is skipped as a whole while the round goes on.
    public struct Savepoint {
        fileprivate let commands: [Key: Command]
        fileprivate let readers: [String: Set<Key>]
        fileprivate let definitionsAtCommit: [Key: CommandDefinition]?
    }

    /// Marks where ``restore(_:)`` goes back to (the model takes its own savepoint, ``PropertyModel/savepoint()``).
    public func savepoint() -> Savepoint {
        Savepoint(commands: commands, readers: readers, definitionsAtCommit: definitionsAtCommit)
    }

    /// Puts the definitions back as they were at `savepoint`; the round's earlier changes stay.
    /// Nothing may have started or ended an execution in between (a reload runs between rounds).
    public func restore(_ savepoint: Savepoint) {
        commands = savepoint.commands
        readers = savepoint.readers
        definitionsAtCommit = savepoint.definitionsAtCommit
    }

    /// Forgets the snapshot: the round's definitions are durable.
    public func commitRound() { definitionsAtCommit = nil }

    /// Puts definitions back as they were at the last commit (the model must have rolled back
    /// first); returns executions of commands that no longer exist, which the caller must stop.
    public func rollbackRound() -> [Execution] {
        guard let saved = definitionsAtCommit else { return [] }
        definitionsAtCommit = nil
        var ended: [Execution] = []
        for (key, command) in commands where saved[key] == nil { ended += command.running.values }
        var restored: [Key: Command] = [:]
        readers = [:]
        for (key, definition) in saved {
            // Handlers are not part of a round's writes: one that registered or left in the
            // round stays as it is now. A command deleted in the round comes back without one.
            var command = commands[key] ?? Command(definition: definition)
            command.definition = definition
            if !definition.needsHandler { command.handler = nil }
            command.enabled = isEnabled(command)
            restored[key] = command
            if let predicate = definition.enabledWhen { for name in predicate.referencedKeys { readers[name, default: []].insert(key) } }
        }
        commands = restored
        return ended.sorted { $0.id < $1.id }
    }
}
