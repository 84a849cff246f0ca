import DBus
import Dispatch
import PropBus
import PropBusExec

/// The work behind one accepted execution, as the service tracks it until it ends.
struct ExecutionWork {
    let execution: CommandTable.Execution
    /// The `Execute` call waiting for the result; `nil` for `Start`.
    let waiter: MethodCall?
    /// The unique name of the connection that called `Execute` or `Start`; `""` when unknown.
    let caller: String
    /// The spawned argv, for `exec` commands.
    var process: CommandProcess?
    /// The unique name of the handler running it, for `handler` commands.
    var handler: String?
    /// Fires the command's timeout.
    var timer: DispatchWorkItem?
    /// Why the execution is being stopped (a cancel, a timeout, a shutdown): reported instead
    /// of the process's own ending once it is gone.
    var stopReason: PropBusError?
}
