import DBus
import Dispatch
import Glibc
import Synchronization
import SystemKit

/// One run of a command's argv: spawned without a shell in its own process group, the input on
/// stdin, stdout captured up to a limit and the tail of stderr kept.
///
/// The process group lets a cancel or timeout stop the whole tree the command started, and
/// when the program itself exits, whatever it left behind in its group is killed too, so no
/// stray child can hold the pipes open (or run on unseen).
///
/// `@unchecked Sendable`: `pid` is immutable and `ended` is atomic; the I/O state belongs to
/// the one thread that runs ``pump``.
public final class CommandProcess: @unchecked Sendable {
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

        /// The execution's result as SPEC §6 defines it: stdout as a string (without one
        /// trailing newline, like `$(…)` minus the rest) on exit status 0; otherwise
        /// `ExecutionFailed` with the status and the end of stderr, or `LimitsExceeded`.
        public func result(of command: Key) -> Result<String, PropBusError> {
            switch ending {
            case .exited(0):
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

        /// The last few lines of stderr, for an error message.
        private var stderrSummary: String {
            let lines = errorTail.split(separator: "\n", omittingEmptySubsequences: true).suffix(5).joined(separator: "\n")
            return lines.isEmpty ? " (nothing on stderr)" : "; stderr: " + lines
        }
    }

    /// The process id, which is also the process group id.
    public let pid: pid_t
    private let ended = Atomic<Bool>(false)
    private let outputLimit: Int
    private let errorTailLimit: Int

    private init(pid: pid_t, outputLimit: Int, errorTailLimit: Int) {
        self.pid = pid
        self.outputLimit = outputLimit
        self.errorTailLimit = errorTailLimit
    }

    /// Spawns `argv` (`posix_spawnp`: the program is looked up in `PATH`) and reports the outcome
    /// through `completion`, on a background thread.
    ///
    /// - Throws: `ExecutionFailed` with the `errno` text when the program cannot be started.
    public static func start(_ argv: [String], input: [UInt8], environment: [String: String] = [:],
                             outputLimit: Int, errorTailLimit: Int = 4096,
                             completion: @escaping @Sendable (Outcome) -> Void) throws(PropBusError) -> CommandProcess {
        var stdinPipe: [Int32] = [-1, -1], stdoutPipe: [Int32] = [-1, -1], stderrPipe: [Int32] = [-1, -1]
        func failure(_ what: String, _ code: Int32) -> PropBusError {
            PropBusError(.executionFailed, "\(what): \(String(cString: strerror(code)))")
        }
        guard pipe(&stdinPipe) == 0 else { throw failure("cannot create a pipe", errno) }
        guard pipe(&stdoutPipe) == 0 else {
            closeAll(stdinPipe)
            throw failure("cannot create a pipe", errno)
        }
        guard pipe(&stderrPipe) == 0 else {
            closeAll(stdinPipe + stdoutPipe)
            throw failure("cannot create a pipe", errno)
        }
        // Close-on-exec, so no other command inherits these ends. (pipe2 is not exported to
        // Swift; spawns all happen on the caller's one queue, so nothing spawns in between.)
        for descriptor in stdinPipe + stdoutPipe + stderrPipe { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, stdinPipe[0], STDIN_FILENO)
        posix_spawn_file_actions_adddup2(&actions, stdoutPipe[1], STDOUT_FILENO)
        posix_spawn_file_actions_adddup2(&actions, stderrPipe[1], STDERR_FILENO)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // The daemon ignores SIGPIPE and libdispatch blocks the signals it watches; the command
        // must start with default dispositions and an empty mask, or SIGTERM would not stop it.
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var mask = sigset_t()
        sigemptyset(&mask)
        posix_spawnattr_setsigmask(&attributes, &mask)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP))

        let variables = Environment.current.merging(environment) { $1 }
        let argvC = argv.map { strdup($0) } + [nil]
        let envC = variables.map { strdup($0.key + "=" + $0.value) } + [nil]
        defer {
            argvC.forEach { free($0) }
            envC.forEach { free($0) }
        }
        var pid: pid_t = 0
        let result = posix_spawnp(&pid, argv[0], &actions, &attributes, argvC, envC)
        closeAll([stdinPipe[0], stdoutPipe[1], stderrPipe[1]])
        guard result == 0 else {
            closeAll([stdinPipe[1], stdoutPipe[0], stderrPipe[0]])
            throw failure("cannot start \(argv[0])", result)
        }
        let process = CommandProcess(pid: pid, outputLimit: outputLimit, errorTailLimit: errorTailLimit)
        let streams = (input: stdinPipe[1], output: stdoutPipe[0], error: stderrPipe[0])
        // A blocking loop of its own; executions are bounded by --max-executions.
        DispatchQueue.global(qos: .utility).async {
            completion(process.pump(input: input, streams: streams))
        }
        return process
    }

    /// The largest input also passed in `PROPBUS_INPUT`: the kernel limits one environment string.
    public static let maximumEnvironmentInput = 64 * 1024

    /// Starts one execution of `command` the way SPEC §6 gives it to a program: `input` as text
    /// (scalars plain, containers as JSON) on stdin and, when it fits in one environment string,
    /// in `PROPBUS_INPUT`, with `PROPBUS_COMMAND` and `PROPBUS_EXECUTION_ID` set.
    public static func execute(_ argv: [String], command: Key, execution id: UInt64, input: DBusValue, outputLimit: Int,
                               completion: @escaping @Sendable (Outcome) -> Void) throws(PropBusError) -> CommandProcess {
        let text = ValueText.format(input)
        var environment = ["PROPBUS_COMMAND": command.text, "PROPBUS_EXECUTION_ID": String(id)]
        if text.utf8.count <= maximumEnvironmentInput { environment["PROPBUS_INPUT"] = text }
        return try start(argv, input: Array(text.utf8), environment: environment, outputLimit: outputLimit, completion: completion)
    }

    /// Stops the whole process group: SIGTERM now, SIGKILL after `grace` seconds if it is still there.
    public func terminate(grace: Double) {
        guard !ended.load(ordering: .acquiring) else { return }
        kill(-pid, SIGTERM)
        DispatchQueue.global().asyncAfter(deadline: .now() + grace) { [self] in
            guard !ended.load(ordering: .acquiring) else { return }
            kill(-pid, SIGKILL)
        }
    }

    /// Feeds stdin, drains stdout and stderr until the program exits, then reaps it.
    private func pump(input: [UInt8], streams: (input: Int32, output: Int32, error: Int32)) -> Outcome {
        var inputFD = input.isEmpty ? -1 : streams.input
        if inputFD < 0 { close(streams.input) }
        var outputFD = streams.output, errorFD = streams.error
        for fd in [inputFD, outputFD, errorFD] where fd >= 0 { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        var written = 0
        var output: [UInt8] = []
        var errorTail: [UInt8] = []
        var tooLarge = false
        var buffer = [UInt8](repeating: 0, count: 65536)

        /// Reads what `fd` has now, 16 buffers at most so that the limits are checked between
        /// reads however fast the program writes; false at end of file.
        func drain(_ fd: Int32, into sink: (ArraySlice<UInt8>) -> Void) -> Bool {
            for _ in 0..<16 {
                let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if count > 0 { sink(buffer[0..<count]); continue }
                if count == 0 { return false }
                return errno == EINTR || errno == EAGAIN
            }
            return true
        }
        func keepTail(_ bytes: ArraySlice<UInt8>) {
            errorTail += bytes
            if errorTail.count > errorTailLimit { errorTail.removeFirst(errorTail.count - errorTailLimit) }
        }
        func closeOutput() { close(outputFD); outputFD = -1 }

        var leaderExited = false
        while outputFD >= 0 || errorFD >= 0 || inputFD >= 0 {
            var fds: [pollfd] = []
            if outputFD >= 0 { fds.append(pollfd(fd: outputFD, events: Int16(POLLIN), revents: 0)) }
            if errorFD >= 0 { fds.append(pollfd(fd: errorFD, events: Int16(POLLIN), revents: 0)) }
            if inputFD >= 0 { fds.append(pollfd(fd: inputFD, events: Int16(POLLOUT), revents: 0)) }
            _ = poll(&fds, nfds_t(fds.count), 100)
            if outputFD >= 0, !drain(outputFD, into: { output += $0 }) { closeOutput() }
            if output.count > outputLimit, !tooLarge {
                tooLarge = true
                kill(-pid, SIGKILL)
                closeOutput()
            }
            if errorFD >= 0, !drain(errorFD, into: keepTail) { close(errorFD); errorFD = -1 }
            if inputFD >= 0 {
                let count = input.withUnsafeBytes { write(inputFD, $0.baseAddress! + written, $0.count - written) }
                if count > 0 { written += count }
                // EPIPE: the program does not read its input, which is its right.
                if written == input.count || (count < 0 && errno != EAGAIN && errno != EINTR) { close(inputFD); inputFD = -1 }
            }
            // The program exited but something in its group still holds a pipe: take what is
            // there and end the group, rather than wait for a stray child.
            var info = siginfo_t()
            if waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0, info._sifields._sigchld.si_pid == pid {
                if outputFD >= 0 { _ = drain(outputFD, into: { output += $0 }) }
                if errorFD >= 0 { _ = drain(errorFD, into: keepTail) }
                if output.count > outputLimit { tooLarge = true }
                leaderExited = true
                break
            }
        }
        // Both pipes closed first (the usual order at exit, or a program that redirected its
        // output): the program itself still decides when it ends.
        if !leaderExited {
            var info = siginfo_t()
            while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) < 0, errno == EINTR {}
        }
        // The group must be gone before the leader is reaped: after that its id may be reused.
        kill(-pid, SIGKILL)
        ended.store(true, ordering: .releasing)
        for fd in [inputFD, outputFD, errorFD] where fd >= 0 { close(fd) }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0, errno == EINTR {}
        let ending: Ending
        if tooLarge {
            ending = .outputTooLarge
            output = Array(output.prefix(outputLimit))
        } else if status & 0x7f == 0 {
            ending = .exited((status >> 8) & 0xff)
        } else {
            ending = .signaled(status & 0x7f)
        }
        return Outcome(ending: ending, output: output, errorTail: String(decoding: errorTail, as: UTF8.self), outputLimit: outputLimit)
    }

    private static func closeAll(_ descriptors: [Int32]) {
        for descriptor in descriptors where descriptor >= 0 { close(descriptor) }
    }
}
