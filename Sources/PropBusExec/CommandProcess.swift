import DBusValues
import Glibc
import PropBus
import SystemKit

/// One run of a command's argv: spawned without a shell in its own process group, the input on
/// stdin, stdout captured up to a limit and the tail of stderr kept, all by a ``CommandIOLoop``.
///
/// The process group lets a cancel or timeout stop the whole tree the command started, and
/// when the program itself exits, whatever it left behind in its group is killed too, so no
/// stray child can hold the pipes open (or run on unseen).
///
/// `Sendable`: a handle of immutable values; the I/O state belongs to the loop's thread.
public final class CommandProcess: Sendable {
    /// How a run ended.
    public enum Ending: Sendable, Equatable {
        /// The program exited with this status.
        case exited(Int32)
        /// The program was killed by this signal.
        case signaled(Int32)
        /// It wrote more than the output limit to stdout and was killed.
        case outputTooLarge
    }

    /// What a finished run produced.
    public struct Outcome: Sendable {
        public var ending: Ending
        /// Everything it wrote to stdout (up to the limit).
        public var output: [UInt8]
        /// The last bytes it wrote to stderr.
        public var errorTail: String
        /// The output limit the run had.
        public var outputLimit: Int

        /// The execution's result: stdout as a string (without one trailing newline, like
        /// `$(…)` minus the rest) on exit status 0; otherwise `ExecutionFailed` with the status
        /// and the end of stderr, or `LimitsExceeded`.
        ///
        /// A result is text: stdout that is not UTF-8, or holds a NUL byte (which no D-Bus string
        /// can carry), is `InvalidOutput` naming the first offending offset, never a string with
        /// replacement characters.
        public func result(of command: Key) -> Result<String, PropBusError> {
            switch ending {
            case .exited(0):
                if let problem = TextBytes.firstProblem(in: output) {
                    return .failure(PropBusError(.invalidOutput, "command \(command) wrote \(problem) of its stdout; "
                                                 + "the output of a command must be UTF-8 text without NUL bytes"))
                }
                var text = String(decoding: output, as: UTF8.self)
                if text.hasSuffix("\n") { text.removeLast() }
                return .success(text)
            case .exited(let status):
                return .failure(PropBusError(.executionFailed, "command \(command) exited with status \(status)\(stderrSummary)"))
            case .signaled(let signal):
                return .failure(PropBusError(.executionFailed, "command \(command) was killed by signal \(signal)\(stderrSummary)"))
            case .outputTooLarge:
                return .failure(PropBusError(.limitsExceeded, "command \(command) wrote more than \(outputLimit) bytes to stdout; it was stopped"))
            }
        }

        /// The last few lines of stderr, for an error message. Invalid UTF-8 (decoded already)
        /// and NUL bytes show as U+FFFD: a D-Bus string cannot carry a NUL, and the message
        /// is only a diagnostic.
        private var stderrSummary: String {
            let lines = errorTail.split(separator: "\n", omittingEmptySubsequences: true).suffix(5).joined(separator: "\n")
            return lines.isEmpty ? " (nothing on stderr)" : "; stderr: " + TextBytes.replacingNUL(in: lines)
        }
    }

    /// The process id, which is also the process group id.
    public let pid: pid_t
    private let loop: CommandIOLoop
    /// The process's identity in `loop`: unlike a pid, never reused.
    private let token: UInt64

    private init(pid: pid_t, loop: CommandIOLoop, token: UInt64) {
        self.pid = pid
        self.loop = loop
        self.token = token
    }

    /// Spawns `argv` (`posix_spawnp`: the program is looked up in `PATH`), hands its I/O to
    /// `loop` and reports the outcome through `completion`, on the loop's thread.
    ///
    /// - Throws: `ExecutionFailed` with the `errno` text when the program cannot be started;
    ///   `LimitsExceeded` when `loop` already holds its capacity.
    public static func start(_ argv: [String], input: [UInt8], environment: [String: String] = [:],
                             outputLimit: Int, errorTailLimit: Int = 4096, loop: CommandIOLoop,
                             completion: @escaping @Sendable (Outcome) -> Void) throws(PropBusError) -> CommandProcess {
        let token = try loop.reserve(for: argv)
        do {
            return try spawn(argv, input: input, environment: environment, outputLimit: outputLimit, errorTailLimit: errorTailLimit,
                             loop: loop, token: token, completion: completion)
        } catch {
            loop.release()
            throw error
        }
    }

    private static func spawn(_ argv: [String], input: [UInt8], environment: [String: String], outputLimit: Int, errorTailLimit: Int,
                              loop: CommandIOLoop, token: UInt64,
                              completion: @escaping @Sendable (Outcome) -> Void) throws(PropBusError) -> CommandProcess {
        func failure(_ what: String, _ code: Errno) -> PropBusError {
            PropBusError(.executionFailed, "\(what): \(code)")
        }
        var opened: [Int32] = []
        func makePipe() throws(PropBusError) -> (read: Int32, write: Int32) {
            switch Subprocess.pipe() {
            case .success(let ends):
                opened += [ends.read, ends.write]
                return ends
            case .failure(let code):
                closeAll(opened)
                throw failure("cannot create a pipe", code)
            }
        }
        let stdinPipe = try makePipe(), stdoutPipe = try makePipe(), stderrPipe = try makePipe()
        // The daemon ignores SIGPIPE and libdispatch blocks the signals it watches; the command
        // must start with default dispositions and an empty mask, or SIGTERM would not stop it.
        let spawned = Subprocess.spawn(
            argv, redirections: [(STDIN_FILENO, stdinPipe.read), (STDOUT_FILENO, stdoutPipe.write), (STDERR_FILENO, stderrPipe.write)],
            environment: Environment.current.merging(environment) { $1 },
            defaultSignals: [SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2],
            emptySignalMask: true, ownProcessGroup: true)
        closeAll([stdinPipe.read, stdoutPipe.write, stderrPipe.write])
        let pid: pid_t
        switch spawned {
        case .success(let child): pid = child
        case .failure(let code):
            closeAll([stdinPipe.write, stdoutPipe.read, stderrPipe.read])
            throw failure("cannot start \(argv[0])", code)
        }
        loop.add(ProcessRun(token: token, pid: pid, input: input, streams: (stdinPipe.write, stdoutPipe.read, stderrPipe.read),
                            outputLimit: outputLimit, errorTailLimit: errorTailLimit, completion: completion))
        return CommandProcess(pid: pid, loop: loop, token: token)
    }

    /// The largest input also passed in `PROPBUS_INPUT`: the kernel limits one environment string.
    public static let maximumEnvironmentInput = 64 * 1024

    /// Starts one execution of `command` the way docs/commands.md gives it to a program: `input` as text
    /// (scalars plain, containers as JSON) on stdin and, when it fits in one environment string,
    /// in `PROPBUS_INPUT`, with `PROPBUS_COMMAND` and `PROPBUS_EXECUTION_ID` set.
    public static func execute(_ argv: [String], command: Key, execution id: UInt64, input: DBusValue, outputLimit: Int,
                               loop: CommandIOLoop, completion: @escaping @Sendable (Outcome) -> Void) throws(PropBusError) -> CommandProcess {
        let text = ValueText.format(input)
        var environment = ["PROPBUS_COMMAND": command.text, "PROPBUS_EXECUTION_ID": String(id)]
        if text.utf8.count <= maximumEnvironmentInput { environment["PROPBUS_INPUT"] = text }
        return try start(argv, input: Array(text.utf8), environment: environment, outputLimit: outputLimit, loop: loop, completion: completion)
    }

    /// Stops the whole process group: SIGTERM now, SIGKILL after `grace` seconds if it is still
    /// there. Nothing once the run has ended.
    public func terminate(grace: Double) {
        loop.terminate(token, grace: grace)
    }

    private static func closeAll(_ descriptors: [Int32]) {
        for descriptor in descriptors where descriptor >= 0 { close(descriptor) }
    }
}
