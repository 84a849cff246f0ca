import DBus
import Dispatch
import PropBus
import PropBusExec
import SystemKit

extension Service {
    /// The path and interface at which handler clients export `Run` (and `Cancel`).
    static let handlerPath = PropBusAPI.handlerPath
    static let handlerInterface = PropBusAPI.handlerInterface

    /// Accepts an execution of `key` and starts its work; returns its id.
    ///
    /// Acceptance changes the state at once (`Executing`, and `Enabled` of a serial command), so
    /// a second call in the same round is refused with `NotEnabled`.
    func startExecution(of key: Key, input: DBusValue, call: MethodCall, waits: Bool) throws(DBusError) -> UInt64 {
        // The caller's write rights on the command were checked by the tree: Execute and Start
        // declare them (``MethodAccess/write(_:kind:)`` of kind ``NameKind/command``).
        guard let definition = commands.definition(of: key) else { throw .unknownObject("no command named \(key)") }
        // The program or handler would get the daemon's own duplicate, a number that means
        // nothing to it (and the daemon would hand out its descriptors).
        guard !input.containsUnixFD else {
            throw .invalidArgs("the input of command \(key) holds a unix fd ('h'); fds cannot be passed to an execution")
        }
        let (execution, changes) = try bridged { () throws(PropBusError) in
            try commands.accept(key.text, input: input, principal: call.credentials?.userID)
        }
        publish(changes)
        let path = Key.objectPath(ofGroup: key.text)
        // Its size only: Started is broadcast, and an input may be a secret of the caller's.
        tree.emitAtFlush(path: path, interface: Self.commandInterface, member: "Started", [.uint64(execution.id), .uint64(UInt64(execution.inputSize))])
        var work = ExecutionWork(execution: execution, waiter: waits ? call : nil, caller: call.sender)
        if let timeout = definition.timeout {
            let timer = DispatchWorkItem { [weak self] in
                self?.cancelExecution(execution.id, of: key, reason: PropBusError(.timedOut, "execution \(execution.id) of command \(key) did not finish within \(timeout) s"))
            }
            tree.connection.queue.asyncAfter(deadline: .now() + timeout, execute: timer)
            work.timer = timer
        }
        running[execution.id] = work
        switch definition.work {
        case .exec(let argv): spawn(argv, for: execution)
        case .handler: forward(execution, to: commands.handler(of: key) ?? "")
        }
        return execution.id
    }

    private func spawn(_ argv: [String], for execution: CommandTable.Execution) {
        // The outcome comes on the I/O loop's thread, the service is the queue's: it hops over,
        // and keeps the service until the process is reaped.
        let service = LoopBound(self, on: tree.connection.queue)
        do {
            let process = try CommandProcess.execute(argv, command: execution.command, execution: execution.id, input: execution.input,
                                                     outputLimit: model.limits.maximumValueSize, loop: executionIO) { outcome in
                service.queue.async { service.value.processEnded(execution, outcome) }
            }
            running[execution.id]?.process = process
        } catch {
            // Reported in the next round, after Started and Executing=true went out.
            let failure = PropBusError(.executionFailed, "command \(execution.command): \(error.message)").dbusError
            later { $0.finishExecution(execution.id, of: execution.command, .failure(failure)) }
        }
    }

    private func processEnded(_ execution: CommandTable.Execution, _ outcome: CommandProcess.Outcome) {
        guard let work = running[execution.id] else { return }
        let key = execution.command
        let result: Result<DBusValue, DBusError>
        if let reason = work.stopReason {
            result = .failure(reason.dbusError)
        } else {
            result = outcome.result(of: key).map { .string($0) }.mapError(\.dbusError)
        }
        finishExecution(execution.id, of: key, result)
    }

    /// Calls `Handler.Run` on the handler; its reply (or error) is the execution's outcome.
    private func forward(_ execution: CommandTable.Execution, to handler: String) {
        running[execution.id]?.handler = handler
        let key = execution.command
        do {
            let message = try Message.methodCall(destination: handler, path: Self.handlerPath, interface: Self.handlerInterface, member: "Run")
            try message.append([.string(key.text), .uint64(execution.id), .variant(execution.input)])
            // No libdbus timeout: the command's own timeout, if any, is the limit.
            tree.connection.call(message, timeoutMilliseconds: Int32.max) { [weak self] reply in
                guard let self else { return }
                let result: Result<DBusValue, DBusError>
                switch reply {
                case .success(let message):
                    if let arguments = try? message.arguments(), let value = arguments.first {
                        let value = value.unwrappingVariantOnce
                        result = value.containsUnixFD
                            ? .failure(PropBusError(.invalidArgs, "the handler of command \(key) returned a result holding a unix fd ('h') for execution \(execution.id); fds cannot be results").dbusError)
                            : .success(value)
                    } else {
                        result = .failure(PropBusError(.executionFailed, "the handler of command \(key) sent no result (expected a 'v')").dbusError)
                    }
                case .failure(let error) where Self.meansVanished(error):
                    result = .failure(PropBusError(.handlerVanished, "the handler of command \(key) left the bus during execution \(execution.id)").dbusError)
                case .failure(let error):
                    // The handler's own error name and message describe the failure best.
                    result = .failure(error)
                }
                finishExecution(execution.id, of: key, result)
            }
        } catch {
            let failure = PropBusError(.executionFailed, "cannot call the handler of command \(key): \(error.message)").dbusError
            later { $0.finishExecution(execution.id, of: key, .failure(failure)) }
        }
    }

    private static func meansVanished(_ error: DBusError) -> Bool {
        error.name == DBusError.Name.serviceUnknown || error.name == DBusError.Name.nameHasNoOwner
            || (error.name == DBusError.Name.noReply && error.message.contains("disconnected"))
    }

    /// Stops an execution, which then fails with `reason`. A process gets SIGTERM (then SIGKILL)
    /// and the execution ends when it is gone; a handler's execution ends at once.
    func cancelExecution(_ id: UInt64, of key: Key, reason: PropBusError) {
        guard var work = running[id], work.stopReason == nil else { return }
        work.stopReason = reason
        running[id] = work
        if let process = work.process {
            process.terminate(grace: options.killGrace)
        } else {
            if let handler = work.handler, let message = try? Message.methodCall(destination: handler, path: Self.handlerPath,
                                                                               interface: Self.handlerInterface, member: "Cancel") {
                // A courtesy, so the handler can stop its work; nothing waits for the answer.
                try? message.append([.string(key.text), .uint64(id)])
                message.noReply = true
                tree.connection.send(message)
            }
            finishExecution(id, of: key, .failure(reason.dbusError))
        }
    }

    /// Ends an execution: the state changes, `Finished` or `Failed` goes out, and a waiting
    /// `Execute` gets its reply. Later reports about the same execution are ignored.
    func finishExecution(_ id: UInt64, of key: Key, _ result: Result<DBusValue, DBusError>) {
        guard let work = running.removeValue(forKey: id) else { return }
        let result = Self.sendable(result, of: id, key)
        work.timer?.cancel()
        // Its process group is gone already; what left the group (setsid) goes now, before the
        // reply, so a caller never sees an ended execution with work still running.
        if work.process != nil { sweepLeftovers() }
        publish(commands.finish(id, of: key))
        let path = Key.objectPath(ofGroup: key.text)
        switch result {
        case .success(let value):
            // Charged to who ran it: a result as large as --max-value-size goes to every subscriber.
            tree.emitAtFlush(path: path, interface: Self.commandInterface, member: "Finished", [.uint64(id), .variant(value)],
                             chargedTo: SignalCause(sender: work.caller, userID: work.execution.principal))
            work.waiter?.reply([.variant(value)])
        case .failure(let error):
            tree.emitAtFlush(path: path, interface: Self.commandInterface, member: "Failed", [.uint64(id), .string(error.name), .string(error.message)])
            work.waiter?.fail(error)
        }
        tree.connection.scheduleRound()
    }

    /// `result` as it can go on the wire. An outcome that cannot be marshalled would leave the
    /// waiting `Execute` with a generic error and everyone else without `Finished` or `Failed`
    /// (`propctl exec` waits for them): it becomes a failure that can.
    private static func sendable(_ result: Result<DBusValue, DBusError>, of id: UInt64, _ key: Key) -> Result<DBusValue, DBusError> {
        switch result {
        case .success(let value):
            do {
                try value.validate()
                return result
            } catch {
                return .failure(PropBusError(.invalidOutput, "the result of execution \(id) of command \(key) cannot be sent: \(error.reason)").dbusError)
            }
        case .failure(let error):
            return .failure(DBusError(name: error.name, message: TextBytes.replacingNUL(in: error.message)))
        }
    }

    /// Kills what ended executions left behind and reaps the daemon's zombie orphans; comes
    /// back while anything was killed, to reap it and catch what it left in turn.
    func sweepLeftovers(attempt: Int = 0) {
        dispatchPrecondition(condition: .onQueue(tree.connection.queue))
        // Every program the I/O loop runs (renders' checks and reloads too) is its to reap.
        let leaders = Set(running.values.compactMap { $0.process?.pid }).union(executionIO.processIDs)
        let killed = LeftoverProcesses.sweep(running: Set(running.keys), leaders: leaders)
        guard killed > 0 || attempt == 0, attempt < 100 else { return }
        later(.now() + 0.05) { $0.sweepLeftovers(attempt: attempt + 1) }
    }

    /// Cancels every running execution (SIGTERM): a daemon that stops must not leave work
    /// running unseen. Calls `completion` on the queue once all have ended, or after the grace
    /// period and one more second, whichever comes first.
    public func stopAllExecutions(completion: @escaping () -> Void) {
        dispatchPrecondition(condition: .onQueue(tree.connection.queue))
        for (id, work) in running.sorted(by: { $0.key < $1.key }) {
            cancelExecution(id, of: work.execution.command,
                            reason: PropBusError(.cancelled, "execution \(id) of command \(work.execution.command) was cancelled: propbusd is stopping"))
        }
        waitForExecutions(until: .now() + options.killGrace + 1, then: completion)
    }

    /// Kills every running exec execution's process group now (SIGTERM, then SIGKILL at once),
    /// waits at most `timeout` seconds for them to be reaped, then kills what they left behind:
    /// for a daemon that must exit at once (it lost its bus), which can neither announce the
    /// ends nor wait for a graceful one, but must not leave work running unseen.
    public func killAllExecutions(timeout: Double) {
        dispatchPrecondition(condition: .onQueue(tree.connection.queue))
        for work in running.values { work.process?.terminate(grace: 0) }
        executionIO.waitUntilIdle(timeout: timeout)
        _ = LeftoverProcesses.sweep(running: [], leaders: [])
    }

    private func waitForExecutions(until deadline: DispatchTime, then completion: @escaping () -> Void) {
        if running.isEmpty || DispatchTime.now() >= deadline { return completion() }
        // Strong: the completion must come even if the daemon let go of the service meanwhile.
        let service = LoopBound(self, on: tree.connection.queue), box = LoopBound(completion, on: tree.connection.queue)
        service.queue.asyncAfter(deadline: .now() + 0.02) { service.value.waitForExecutions(until: deadline, then: box.value) }
    }
}
