import DBus
import Dispatch
import PropBus
import PropBusSystem

extension Service {
    /// Reload, ListUnclaimed and Prune of the Manager interface: the model-file lifecycle.
    func modelFileMethods() -> [MethodDescription] {
        [
            MethodDescription("Reload", out: [("skipped", .array(.structure([.string, .string])))],
                              access: .privileged(.fixed("the model files (Reload)"))) { [unowned self] call throws(DBusError) in
                guard let reloadHandler else { throw .failed("this propbusd reads no model files") }
                // Answered once the files were read (off the queue) and applied between rounds.
                let pending = QueueBound(call)
                reloadHandler { result in
                    switch result {
                    case .success(let skipped): pending.value.reply([Self.skippedList(skipped)])
                    case .failure(let error): pending.value.fail(error)
                    }
                }
                return .deferred
            },
            // Values without a definition have no readers list: only writers see them.
            MethodDescription("ListUnclaimed", out: [("values", .array(.structure([.string, .variant])))],
                              access: .privileged(.fixed("unclaimed stored values (ListUnclaimed)"))) { [unowned self] _ in
                return .reply([Self.unclaimedList(model.unclaimed)])
            },
            MethodDescription("Prune", in: [("keys", .array(.string))], out: [("pruned", .array(.string))], writes: true,
                              access: .privileged(.fixed("unclaimed stored values (Prune)"))) { [unowned self] call throws(DBusError) in
                var keys: [Key] = []
                for item in try call.strings("keys") {
                    keys.append(try bridged { () throws(PropBusError) in try Key(item) })
                }
                let pruned = model.prune(keys)
                return .reply([.array(of: .string, pruned.map { .string($0.text) })])
            },
        ]
    }

    /// Applies what a reload changed: publishes it, commits, and flushes the signals in a round
    /// of their own. Call on the queue, between rounds.
    public func applyReload(_ report: ModelFileSet.Report, skipped: [ModelFileSet.Skipped]) throws(DBusError) {
        dispatchPrecondition(condition: .onQueue(tree.connection.queue))
        // A command its file dropped was deleted: its executions fail as with DeleteCommand.
        for execution in report.ended {
            cancelExecution(execution.id, of: execution.command,
                            reason: PropBusError(.cancelled, "command \(execution.command) was removed from its model file while execution \(execution.id) ran"))
        }
        publish(report.changes)
        // A key a file made a fleet key may be driven by a command's state: that binding ends,
        // as at start-up (the daemon) and when the fleet defines the key (Fleet.apply).
        if let fleet { publish(fleet.endBindingsOfStateToFleetKeys()) }
        defer { tree.connection.scheduleRound() }
        if let error = commit() { throw error }
        // Only once committed: a reload that did not take leaves the last list standing.
        if skipped != skippedModelFiles {
            // GDBus proxies cache the list until told it changed.
            tree.noteChange(path: Key.rootPath, interface: Self.managerInterface, property: "SkippedModelFiles",
                            oldValue: Self.skippedList(skippedModelFiles))
            skippedModelFiles = skipped
        }
        // Fleet keys a file declares anew are offered to the fleet, as at start.
        if let fleet, fleet.state == .connected { fleet.pushLocalDefinitions() }
    }

    static func skippedList(_ skipped: [ModelFileSet.Skipped]) -> DBusValue {
        .array(of: .structure([.string, .string]), skipped.map { .structure([.string($0.path), .string($0.reason)]) })
    }

    static func unclaimedList(_ values: [(key: Key, value: DBusValue)]) -> DBusValue {
        .array(of: .structure([.string, .variant]), values.map {
            // An older version's value may be too deep to send back, and would fail the reply.
            let shown = PropertyDefinition.canSendBack($0.value) ? $0.value : .string("(not shown: nested \($0.value.nestingDepth) levels deep)")
            return .structure([.string($0.key.text), .variant(shown)])
        })
    }
}

/// A value handed to a block that runs on the connection's queue, where it was made and where
/// alone it is used; `@unchecked Sendable` for that reason.
private struct QueueBound<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
