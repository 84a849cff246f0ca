import DBus
import Dispatch
import PropBus
import PropBusModelFiles
import SystemKit

extension Service {
    /// Reload, ListUnclaimed and Prune of the Manager interface: the model-file lifecycle.
    func modelFileMethods() -> [MethodDescription] {
        [
            MethodDescription("Reload", out: [("skipped", .array(.structure([.string, .string])))],
                              access: .privileged(.fixed("the model files (Reload)"))) { [unowned self] call throws(DBusError) in
                guard let reloadHandler else { throw .failed("this propbusd reads no model files") }
                // Answered once the files were read (off the queue) and applied between rounds.
                let pending = LoopBound(call, on: tree.connection.queue)
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
            // ListUnclaimed past the message limit: a prefix, and pages that always fit.
            MethodDescription("ListUnclaimedPage", in: [("prefix", .string), ("after", .string), ("limit", .uint32)],
                              out: [("values", .array(Self.unclaimedRow)), ("next", .string)],
                              access: .privileged(.fixed("unclaimed stored values (ListUnclaimedPage)"))) { [unowned self] call throws(DBusError) in
                let prefix = try call.string("prefix"), after = try call.string("after")
                // Keys are ASCII: byte order is the listing's order and the cursor's.
                let chosen = model.unclaimed.lazy.filter { $0.key.text > after && $0.key.text.hasPrefix(prefix) }
                let page = Page(chosen, limit: try call.uint32("limit"), maximumMessageSize: model.limits.maximumMessageSize, row: Self.unclaimedRow)
                return page.reply(rowType: Self.unclaimedRow, cursor: .string(page.last?.key.text ?? ""))
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
    ///
    /// `lockChanged`: the keys whose lock came, went or changed (``PropertyModel/applyLayerFiles(_:)``),
    /// announced by `LocksChanged`.
    public func applyReload(_ report: ModelFileSet.Report, skipped: [ModelFileSet.Skipped], lockChanged: [Key] = []) throws(DBusError) {
        dispatchPrecondition(condition: .onQueue(tree.connection.queue))
        // A command its file dropped was deleted: its executions fail as with DeleteCommand.
        for execution in report.ended {
            cancelExecution(execution.id, of: execution.command,
                            reason: PropBusError(.cancelled, "command \(execution.command) was removed from its model file while execution \(execution.id) ran"))
        }
        publish(report.changes)
        // A key a file gave to the gate may be driven by a command's state: that binding ends,
        // as at start-up (the daemon) and when the gate's owner defines the key.
        if let gate { publish(gate.modelFilesApplied()) }
        defer { tree.connection.scheduleRound() }
        if let error = commit() { throw error }
        // Only once committed: a reload that did not take leaves the last list standing.
        announceLayerChange(lockChanged: lockChanged, skipped: skipped)
        // Keys of the gate's a file declares anew are offered to their owner, as at start.
        gate?.modelFilesCommitted()
    }

    /// Announces at the flush what a change of the layer files did beyond values:
    /// `LocksChanged` for the keys whose lock came, went or changed whom it refuses, and a
    /// change of `SkippedModelFiles` when the skipped model files (`skipped`, `nil`: as they
    /// were) or the layer-file problems are not those last announced.
    func announceLayerChange(lockChanged: [Key], skipped: [ModelFileSet.Skipped]? = nil) {
        if !lockChanged.isEmpty {
            tree.emitAtFlush(path: Key.rootPath, interface: Self.managerInterface, member: "LocksChanged",
                             [.array(of: .string, lockChanged.map { .string($0.text) })])
        }
        let skipped = skipped ?? skippedModelFiles
        let layerProblems = model.layerProblems
        if skipped != skippedModelFiles || layerProblems != announcedLayerProblems {
            // GDBus proxies cache the list until told it changed.
            tree.noteChange(path: Key.rootPath, interface: Self.managerInterface, property: "SkippedModelFiles",
                            oldValue: Self.skippedList(skippedModelFiles + Self.skipped(announcedLayerProblems)))
            skippedModelFiles = skipped
            announcedLayerProblems = layerProblems
        }
    }

    /// Layer-file problems as rows of `SkippedModelFiles` and `Reload`'s reply: the file, and
    /// the problem naming it, its key and what was expected.
    public static func skipped(_ problems: [LayerProblem]) -> [ModelFileSet.Skipped] {
        problems.map { ModelFileSet.Skipped(path: $0.file, reason: $0.description) }
    }

    static func skippedList(_ skipped: [ModelFileSet.Skipped]) -> DBusValue {
        .array(of: .structure([.string, .string]), skipped.map { .structure([.string($0.path), .string($0.reason)]) })
    }

    static func unclaimedList(_ values: [(key: Key, value: DBusValue)]) -> DBusValue {
        .array(of: unclaimedRow, values.map(unclaimedRow))
    }

    /// One row of `ListUnclaimed`: key, value.
    static let unclaimedRow = DBusType.structure([.string, .variant])

    static func unclaimedRow(_ item: (key: Key, value: DBusValue)) -> DBusValue {
        // An older version's value may be too deep to send back, and would fail the reply.
        let shown = PropertyDefinition.canSendBack(item.value) ? item.value : .string("(not shown: nested \(item.value.nestingDepth) levels deep)")
        return .structure([.string(item.key.text), .variant(shown)])
    }
}
