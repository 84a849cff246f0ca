import CLinux
import Glibc
import PropBus
import Synchronization
import SystemKit

/// One thread and one `poll(2)` loop for every ``CommandProcess`` it runs: their stdin writes,
/// stdout and stderr reads, exits (through a pidfd each) and the SIGKILL that follows a SIGTERM
/// after the grace period.
///
/// No execution holds a thread of its own, so a running one can never make another wait, however
/// many run (a blocking loop per execution on Dispatch's pool did: the pool grows about one thread
/// a second). The loop holds at most ``capacity`` processes; its owner (the service, or `propctl
/// serve`) sizes it to the executions it admits. The thread starts with the first process and
/// ends when the last one is reaped.
///
/// Each process's outcome is passed to its completion on the loop's thread; the owner hops to
/// its own queue from there.
public final class CommandIOLoop: @unchecked Sendable {
    // Safety: what other threads touch (`requests`) is behind a mutex; `runs` and `buffer` belong
    // to the loop's one thread (successive threads never overlap: one ends, under the mutex, only
    // when nothing is held, and the next starts under it).
    /// The most processes held at once.
    public let capacity: Int

    private struct Requests {
        /// Processes handed over and not yet taken by the loop.
        var added: [ProcessRun] = []
        /// Stop requests: SIGTERM now, SIGKILL after `grace` seconds.
        var terminations: [(token: UInt64, grace: Double)] = []
        /// Processes reserved, handed over or running: at most `capacity`.
        var held = 0
        var threadRunning = false
        var nextToken: UInt64 = 0
        /// The processes handed over and not reaped yet.
        var processIDs: Set<pid_t> = []
    }

    private let requests = Mutex(Requests())
    /// The eventfd that wakes `poll` when a request comes.
    private let wakeup: Int32
    private var runs: [UInt64: ProcessRun] = [:]
    private var buffer = [UInt8](repeating: 0, count: 65536)

    /// A loop for at most `capacity` processes at once.
    public init(capacity: Int) {
        self.capacity = capacity
        wakeup = propbus_wakeup_fd()
    }

    deinit {
        if wakeup >= 0 { close(wakeup) }
    }

    /// Takes a slot for one process (and starts the thread if it is not running); give it back
    /// with ``release()`` if the process cannot be started. Returns the process's token.
    func reserve(for argv: [String]) throws(PropBusError) -> UInt64 {
        guard wakeup >= 0 else {
            throw PropBusError(.executionFailed, "cannot start \(argv[0]): the execution I/O loop has no eventfd")
        }
        let result: Result<UInt64, PropBusError> = requests.withLock { requests in
            guard requests.held < capacity else {
                return .failure(PropBusError(.limitsExceeded, "cannot start \(argv[0]): \(capacity) executions already run (the I/O loop's capacity)"))
            }
            if !requests.threadRunning {
                guard DetachedThread.start({ [self] in run() }) else {
                    return .failure(PropBusError(.executionFailed, "cannot start \(argv[0]): cannot create the execution I/O thread"))
                }
                requests.threadRunning = true
            }
            requests.held += 1
            requests.nextToken += 1
            return .success(requests.nextToken)
        }
        return try result.get()
    }

    /// Gives back a slot that ``reserve(for:)`` took, for a process that did not start.
    func release() {
        requests.withLock { $0.held -= 1 }
        wake()
    }

    /// Hands a started process to the loop, in the slot reserved for it.
    func add(_ run: ProcessRun) {
        requests.withLock {
            $0.added.append(run)
            $0.processIDs.insert(run.pid)
        }
        wake()
    }

    /// The processes this loop runs and has not reaped: whoever else reaps the children of
    /// this process must leave them alone (the loop reaps them and reports their status).
    public var processIDs: Set<pid_t> { requests.withLock { $0.processIDs } }

    /// SIGTERM to the process group of `token` now, and SIGKILL after `grace` seconds unless it
    /// is gone by then; nothing if it was reaped already. Sent from the loop, the only thread that
    /// reaps, so a signal can never reach a process group whose id was reused.
    func terminate(_ token: UInt64, grace: Double) {
        requests.withLock { $0.terminations.append((token, grace)) }
        wake()
    }

    /// Waits, at most `timeout` seconds, until the loop holds no process (each was reaped and
    /// reported): for a daemon about to exit, whose queue can no longer wait for the reports.
    public func waitUntilIdle(timeout: Double) {
        let deadline = Self.monotonicNow() + UInt64(max(0, timeout) * 1_000_000_000)
        while requests.withLock({ $0.held > 0 }), Self.monotonicNow() < deadline { usleep(10_000) }
    }

    private func wake() {
        var one: UInt64 = 1
        // EAGAIN means the counter is already non-zero: the loop wakes anyway.
        _ = write(wakeup, &one, 8)
    }

    /// The loop: runs until nothing is held.
    private func run() {
        while true {
            let taken: (added: [ProcessRun], terminations: [(token: UInt64, grace: Double)])? = requests.withLock { requests in
                if requests.added.isEmpty, requests.held == 0, runs.isEmpty {
                    requests.threadRunning = false
                    return nil
                }
                defer { requests.added = []; requests.terminations = [] }
                return (requests.added, requests.terminations)
            }
            guard let taken else { return }
            for run in taken.added { runs[run.token] = run }
            let now = Self.monotonicNow()
            for termination in taken.terminations { runs[termination.token]?.terminate(grace: termination.grace, now: now) }

            var descriptors = [pollfd(fd: wakeup, events: Int16(POLLIN), revents: 0)]
            var owners: [(run: ProcessRun, stream: ProcessRun.Stream)] = []
            var timeout: Int32 = -1
            for run in runs.values {
                run.addDescriptors(to: &descriptors, owners: &owners)
                if let deadline = run.killDeadline { timeout = Self.earlier(timeout, milliseconds(until: deadline, from: now)) }
                // Without a pidfd the exit is only seen by asking.
                if run.pidfd < 0 { timeout = Self.earlier(timeout, 100) }
            }
            _ = poll(&descriptors, nfds_t(descriptors.count), timeout)
            if descriptors[0].revents != 0 {
                var count: UInt64 = 0
                _ = read(wakeup, &count, 8)
            }
            for (index, owner) in owners.enumerated() where descriptors[index + 1].revents != 0 {
                owner.run.service(owner.stream, buffer: &buffer)
            }
            let later = Self.monotonicNow()
            for (token, run) in runs {
                run.killIfDue(now: later)
                guard run.hasExited else { continue }
                runs[token] = nil
                let outcome = run.finish(buffer: &buffer)
                requests.withLock {
                    $0.held -= 1
                    $0.processIDs.remove(run.pid)
                }
                run.completion(outcome)
            }
        }
    }

    private func milliseconds(until deadline: UInt64, from now: UInt64) -> Int32 {
        deadline <= now ? 0 : Int32(clamping: (deadline - now + 999_999) / 1_000_000)
    }

    private static func earlier(_ timeout: Int32, _ milliseconds: Int32) -> Int32 {
        timeout < 0 ? milliseconds : min(timeout, milliseconds)
    }

    /// `CLOCK_MONOTONIC` in nanoseconds.
    static func monotonicNow() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}

/// The I/O state of one spawned process, owned by the ``CommandIOLoop`` thread once handed over.
final class ProcessRun: @unchecked Sendable {
    // Safety: built on the spawning thread, then passed once, under the loop's mutex, to the loop's
    // thread, which alone touches it from then on.
    enum Stream { case input, output, error, exit }

    let token: UInt64
    let pid: pid_t
    /// Readable once the process has exited; -1 where `pidfd_open` is not available.
    let pidfd: Int32
    let completion: @Sendable (CommandProcess.Outcome) -> Void
    private let input: [UInt8]
    private let outputLimit: Int
    private let errorTailLimit: Int
    private var inputFD: Int32, outputFD: Int32, errorFD: Int32
    private var written = 0
    private var output: [UInt8] = []
    private var errorTail: [UInt8] = []
    private var tooLarge = false
    private var terminated = false
    /// Set when the pidfd polled readable: the program has exited.
    private var exitSeen = false
    /// When SIGKILL follows the SIGTERM of a ``terminate(grace:now:)``.
    private(set) var killDeadline: UInt64?

    init(token: UInt64, pid: pid_t, input: [UInt8], streams: (input: Int32, output: Int32, error: Int32),
         outputLimit: Int, errorTailLimit: Int, completion: @escaping @Sendable (CommandProcess.Outcome) -> Void) {
        self.token = token
        self.pid = pid
        self.input = input
        self.outputLimit = outputLimit
        self.errorTailLimit = errorTailLimit
        self.completion = completion
        pidfd = propbus_pidfd_open(pid)
        inputFD = streams.input
        outputFD = streams.output
        errorFD = streams.error
        if input.isEmpty {
            close(inputFD)
            inputFD = -1
        }
        for fd in [inputFD, outputFD, errorFD] where fd >= 0 { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
    }

    /// Adds what to wait for: the open pipes, and the exit while it has not come.
    func addDescriptors(to descriptors: inout [pollfd], owners: inout [(run: ProcessRun, stream: Stream)]) {
        if outputFD >= 0 {
            descriptors.append(pollfd(fd: outputFD, events: Int16(POLLIN), revents: 0))
            owners.append((self, .output))
        }
        if errorFD >= 0 {
            descriptors.append(pollfd(fd: errorFD, events: Int16(POLLIN), revents: 0))
            owners.append((self, .error))
        }
        if inputFD >= 0 {
            descriptors.append(pollfd(fd: inputFD, events: Int16(POLLOUT), revents: 0))
            owners.append((self, .input))
        }
        if pidfd >= 0, !exitSeen {
            descriptors.append(pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0))
            owners.append((self, .exit))
        }
    }

    /// Handles readiness of one of its descriptors.
    func service(_ stream: Stream, buffer: inout [UInt8]) {
        switch stream {
        case .output:
            if !drain(outputFD, buffer: &buffer, into: { output += $0 }) { closeOutput() }
            if output.count > outputLimit, !tooLarge {
                tooLarge = true
                kill(-pid, SIGKILL)
                closeOutput()
            }
        case .error:
            if !drain(errorFD, buffer: &buffer, into: keepTail) {
                close(errorFD)
                errorFD = -1
            }
        case .input:
            let count = input.withUnsafeBytes { write(inputFD, $0.baseAddress! + written, $0.count - written) }
            if count > 0 { written += count }
            // EPIPE: the program does not read its input, which is its right.
            if written == input.count || (count < 0 && errno != EAGAIN && errno != EINTR) {
                close(inputFD)
                inputFD = -1
            }
        case .exit:
            exitSeen = true
        }
    }

    /// Whether the program (the group's leader) has exited; it is not reaped yet.
    var hasExited: Bool {
        if pidfd >= 0 { return exitSeen }
        var info = siginfo_t()
        return waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info._sifields._sigchld.si_pid == pid
    }

    /// SIGTERM to the group now, SIGKILL at `now + grace` (the earlier deadline if asked twice).
    func terminate(grace: Double, now: UInt64) {
        if !terminated {
            terminated = true
            kill(-pid, SIGTERM)
        }
        let deadline = now + UInt64(max(0, grace) * 1_000_000_000)
        killDeadline = min(killDeadline ?? deadline, deadline)
    }

    func killIfDue(now: UInt64) {
        guard let deadline = killDeadline, now >= deadline else { return }
        killDeadline = nil
        kill(-pid, SIGKILL)
    }

    /// After the exit: takes what the pipes still hold, ends the group and reaps the leader.
    ///
    /// Something in the group may still hold a pipe (a background child): the program decided
    /// when the execution ends, so its output is what is there now.
    func finish(buffer: inout [UInt8]) -> CommandProcess.Outcome {
        if outputFD >= 0 { _ = drain(outputFD, buffer: &buffer, into: { output += $0 }) }
        if errorFD >= 0 { _ = drain(errorFD, buffer: &buffer, into: keepTail) }
        if output.count > outputLimit { tooLarge = true }
        // The group must be gone before the leader is reaped: after that its id may be reused.
        kill(-pid, SIGKILL)
        for fd in [inputFD, outputFD, errorFD, pidfd] where fd >= 0 { close(fd) }
        inputFD = -1
        outputFD = -1
        errorFD = -1
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0, errno == EINTR {}
        let ending: CommandProcess.Ending
        if tooLarge {
            ending = .outputTooLarge
            output = Array(output.prefix(outputLimit))
        } else if status & 0x7f == 0 {
            ending = .exited((status >> 8) & 0xff)
        } else {
            ending = .signaled(status & 0x7f)
        }
        return CommandProcess.Outcome(ending: ending, output: output, errorTail: String(decoding: errorTail, as: UTF8.self), outputLimit: outputLimit)
    }

    /// Reads what `fd` has now, 16 buffers at most so that the limits are checked between reads
    /// however fast the program writes, and no process keeps the loop from the others; false at
    /// end of file.
    private func drain(_ fd: Int32, buffer: inout [UInt8], into sink: (ArraySlice<UInt8>) -> Void) -> Bool {
        for _ in 0..<16 {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count > 0 { sink(buffer[0..<count]); continue }
            if count == 0 { return false }
            return errno == EINTR || errno == EAGAIN
        }
        return true
    }

    private func keepTail(_ bytes: ArraySlice<UInt8>) {
        errorTail += bytes
        if errorTail.count > errorTailLimit { errorTail.removeFirst(errorTail.count - errorTailLimit) }
    }

    private func closeOutput() {
        close(outputFD)
        outputFD = -1
    }
}
