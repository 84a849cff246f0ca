import DBusValues
import Dispatch
import Foundation
import Glibc
import Synchronization
import XCTest

@testable import PropBus
@testable import PropBusExec

/// `CommandProcess` (a command's `exec`, docs/commands.md): spawning, I/O, limits and stopping the whole group.
final class CommandProcessTests: XCTestCase {
    private var directory: String!

    override func setUpWithError() throws {
        // As the daemon does: a command that stops reading its stdin must not kill us.
        signal(SIGPIPE, SIG_IGN)
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("propbus-process-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: directory)
    }

    private let command = try! Key("vm.search")
    private let loop = CommandIOLoop(capacity: 64)

    /// Receives the outcome on the pump's thread.
    private final class Completion: Sendable {
        let outcome = Mutex<CommandProcess.Outcome?>(nil)
        let done = DispatchSemaphore(value: 0)

        func report(_ outcome: CommandProcess.Outcome) {
            self.outcome.withLock { $0 = outcome }
            done.signal()
        }

        func wait(seconds: Double) -> CommandProcess.Outcome? {
            guard done.wait(timeout: .now() + seconds) == .success else { return nil }
            return outcome.withLock { $0 }
        }
    }

    /// Starts `argv`; returns the process and a way to wait for its outcome.
    private func start(_ argv: [String], input: String = "", environment: [String: String] = [:],
                       outputLimit: Int = 1 << 20, errorTailLimit: Int = 4096) throws -> (CommandProcess, Completion) {
        let completion = Completion()
        let process = try CommandProcess.start(argv, input: Array(input.utf8), environment: environment,
                                               outputLimit: outputLimit, errorTailLimit: errorTailLimit, loop: loop) { completion.report($0) }
        return (process, completion)
    }

    /// Runs `argv` to its end (at most `seconds`).
    private func run(_ argv: [String], input: String = "", environment: [String: String] = [:],
                     outputLimit: Int = 1 << 20, errorTailLimit: Int = 4096, seconds: Double = 2,
                     file: StaticString = #filePath, line: UInt = #line) throws -> CommandProcess.Outcome {
        let (_, completion) = try start(argv, input: input, environment: environment, outputLimit: outputLimit, errorTailLimit: errorTailLimit)
        return try XCTUnwrap(completion.wait(seconds: seconds), "\(argv) did not end within \(seconds) s", file: file, line: line)
    }

    private func text(_ outcome: CommandProcess.Outcome) -> String { String(decoding: outcome.output, as: UTF8.self) }

    private func path(_ name: String) -> String { directory + "/" + name }

    /// Polls until `condition` holds, for at most `seconds`.
    private func eventually(_ seconds: Double = 2, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition() { return true }
            usleep(10_000)
        }
        return condition()
    }

    /// A pid a script wrote to `file`, once it is there.
    private func pid(in file: String, file callerFile: StaticString = #filePath, line: UInt = #line) throws -> pid_t {
        var pid: pid_t?
        _ = eventually {
            pid = (try? String(contentsOfFile: file, encoding: .utf8)).flatMap { pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
            return pid != nil
        }
        return try XCTUnwrap(pid, "no pid in \(file)", file: callerFile, line: line)
    }

    /// Whether `pid` no longer runs: gone, or a zombie no one reaped yet (an orphan whose
    /// reaper is slow counts as dead: it can no longer do or hold anything).
    private static func isDead(_ pid: pid_t) -> Bool {
        if kill(pid, 0) != 0 { return errno == ESRCH }
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return true }
        let state = stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).first
        return state == "Z" || state == "X"
    }

    private func assertFailure(_ result: Result<String, PropBusError>, _ code: PropBusError.Code, containing pieces: [String],
                               file: StaticString = #filePath, line: UInt = #line) {
        guard case .failure(let error) = result else { return XCTFail("expected \(code), got \(result)", file: file, line: line) }
        XCTAssertEqual(error.code, code, error.message, file: file, line: line)
        for piece in pieces {
            XCTAssertTrue(error.message.contains(piece), "'\(error.message)' lacks '\(piece)'", file: file, line: line)
        }
    }

    // MARK: Results

    func testEchoResultIsStdoutWithoutTheTrailingNewline() throws {
        let outcome = try run(["echo", "hi"])
        XCTAssertEqual(outcome.ending, .exited(0))
        XCTAssertEqual(text(outcome), "hi\n")
        XCTAssertEqual(outcome.errorTail, "")
        XCTAssertEqual(try outcome.result(of: command).get(), "hi")
    }

    func testOnlyOneTrailingNewlineIsRemoved() throws {
        XCTAssertEqual(try run(["printf", "a\\n\\n"]).result(of: command).get(), "a\n")
        XCTAssertEqual(try run(["printf", "no newline"]).result(of: command).get(), "no newline")
        XCTAssertEqual(try run(["true"]).result(of: command).get(), "")
    }

    func testOutputThatIsNotTextIsInvalidOutputNamingTheOffset() throws {
        assertFailure(try run(["printf", "ab\\0c"]).result(of: command), .invalidOutput,
                      containing: ["command vm.search wrote a NUL byte at offset 2 of its stdout", "UTF-8 text"])
        assertFailure(try run(["printf", "\\303\\251\\377"]).result(of: command), .invalidOutput, containing: ["invalid UTF-8 at offset 2"])
        // A truncated sequence at the end, an overlong encoding, a UTF-16 surrogate.
        for (bytes, offset) in [([0x61, 0xE2, 0x82], 1), ([0xC0, 0xAF], 0), ([0x78, 0xED, 0xA0, 0x80], 1)] as [([UInt8], Int)] {
            XCTAssertEqual(TextBytes.firstProblem(in: bytes), .invalidUTF8(offset: offset), "\(bytes)")
        }
        XCTAssertNil(TextBytes.firstProblem(in: Array("café € 𝄞".utf8)))
    }

    func testNulOnStderrStaysOutOfTheMessage() throws {
        let outcome = try run(["sh", "-c", "printf 'bad\\0news' >&2; exit 2"])
        assertFailure(outcome.result(of: command), .executionFailed, containing: ["status 2", "bad\u{FFFD}news"])
    }

    func testArgumentsAreNotInterpretedByAShell() throws {
        let outcome = try run(["printf", "%s|", "$HOME", "a b", "`id`", ";", "*"])
        XCTAssertEqual(text(outcome), "$HOME|a b|`id`|;|*|")
    }

    func testNonZeroExitIsExecutionFailedWithStatusAndStderrTail() throws {
        let outcome = try run(["sh", "-c", "echo partial; echo 'no such search: cats' >&2; exit 3"])
        XCTAssertEqual(outcome.ending, .exited(3))
        XCTAssertEqual(text(outcome), "partial\n")
        XCTAssertEqual(outcome.errorTail, "no such search: cats\n")
        assertFailure(outcome.result(of: command), .executionFailed, containing: ["vm.search", "status 3", "no such search: cats"])
    }

    func testFailureWithoutStderrSaysSo() throws {
        let outcome = try run(["sh", "-c", "exit 7"])
        assertFailure(outcome.result(of: command), .executionFailed, containing: ["status 7", "nothing on stderr"])
    }

    func testKilledBySignalIsExecutionFailed() throws {
        let outcome = try run(["sh", "-c", "kill -USR1 $$"])
        XCTAssertEqual(outcome.ending, .signaled(SIGUSR1))
        assertFailure(outcome.result(of: command), .executionFailed, containing: ["vm.search", "signal \(SIGUSR1)"])
    }

    func testStderrTailKeepsTheLastBytesAndTheLastLines() throws {
        let outcome = try run(["sh", "-c", "printf '0123456789abcdef' >&2; exit 1"], errorTailLimit: 10)
        XCTAssertEqual(outcome.errorTail, "6789abcdef")

        let lines = try run(["sh", "-c", "for i in 1 2 3 4 5 6 7 8; do echo line$i >&2; done; exit 1"])
        guard case .failure(let error) = lines.result(of: command) else { return XCTFail() }
        XCTAssertFalse(error.message.contains("line3"), error.message)
        for i in 4...8 { XCTAssertTrue(error.message.contains("line\(i)"), error.message) }
    }

    // MARK: Input and environment

    func testInputReachesStdin() throws {
        let outcome = try run(["cat"], input: "hello\nwörld")
        XCTAssertEqual(text(outcome), "hello\nwörld")
        XCTAssertEqual(outcome.ending, .exited(0))
    }

    func testLargeInputAndOutputDoNotDeadlock() throws {
        // Both pipes fill up at once: the pump must write and read in turn.
        let input = String(repeating: "0123456789abcdef", count: 65536)  // 1 MiB
        let outcome = try run(["cat"], input: input, outputLimit: 2 << 20, seconds: 5)
        XCTAssertEqual(outcome.ending, .exited(0))
        XCTAssertEqual(outcome.output.count, input.utf8.count)
        XCTAssertTrue(text(outcome) == input)
    }

    func testAProgramThatDoesNotReadItsInputStillSucceeds() throws {
        let input = String(repeating: "x", count: 1 << 20)
        let outcome = try run(["true"], input: input)
        XCTAssertEqual(outcome.ending, .exited(0))
        XCTAssertEqual(try run(["head", "-c", "3"], input: input).result(of: command).get(), "xxx")
    }

    func testEnvironmentReachesTheProgram() throws {
        let outcome = try run(["sh", "-c", "printf '%s' \"$PROPBUS_INPUT\""], environment: ["PROPBUS_INPUT": "cats & dogs; $(id)"])
        XCTAssertEqual(text(outcome), "cats & dogs; $(id)")
        // The daemon's own environment is kept, and overridden by the given one.
        setenv("PROPBUS_TEST_INHERITED", "yes", 1)
        defer { unsetenv("PROPBUS_TEST_INHERITED") }
        let inherited = try run(["sh", "-c", "printf '%s %s' \"$PROPBUS_TEST_INHERITED\" \"$HOME\""], environment: ["HOME": "/nowhere"])
        XCTAssertEqual(text(inherited), "yes /nowhere")
    }

    func testTheProgramStartsWithDefaultSignalsAndAnEmptyMask() throws {
        // The caller ignores SIGPIPE (setUp) and blocks SIGUSR2 on its thread.
        var blocked = sigset_t(), previous = sigset_t()
        sigemptyset(&blocked)
        sigaddset(&blocked, SIGUSR2)
        pthread_sigmask(SIG_BLOCK, &blocked, &previous)
        let started = Result(catching: { try start(["grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"]) })
        pthread_sigmask(SIG_SETMASK, &previous, nil)
        let (_, completion) = try started.get()
        let outcome = try XCTUnwrap(completion.wait(seconds: 2))
        var masks: [String: UInt64] = [:]
        for line in text(outcome).split(separator: "\n") {
            let parts = line.split(separator: ":")
            masks[String(parts[0])] = UInt64(parts[1].trimmingCharacters(in: .whitespaces), radix: 16)
        }
        let pipeBit: UInt64 = 1 << (UInt64(SIGPIPE) - 1)
        XCTAssertEqual(try XCTUnwrap(masks["SigIgn"]) & pipeBit, 0, "SIGPIPE is not ignored: \(text(outcome))")
        XCTAssertEqual(masks["SigBlk"], 0, "nothing is blocked: \(text(outcome))")
    }

    func testMissingProgramThrowsExecutionFailed() {
        XCTAssertThrowsError(try start(["/nonexistent/propbus-no-such-program", "x"])) { error in
            let error = error as? PropBusError
            XCTAssertEqual(error?.code, .executionFailed)
            XCTAssertTrue(error?.message.contains("/nonexistent/propbus-no-such-program") == true, error?.message ?? "")
        }
        XCTAssertThrowsError(try start(["propbus-no-such-program-in-path"])) { error in
            XCTAssertEqual((error as? PropBusError)?.code, .executionFailed)
        }
    }

    func testStartingManyProcessesLeaksNoDescriptors() throws {
        // One run first: libdispatch opens its descriptors (epoll, eventfd) on first use, once per
        // process, which is not a leak; run alone (the parallel runner) this test would see them.
        _ = try run(["true"], input: "x")
        let before = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count
        for _ in 0..<20 { _ = try run(["true"], input: "x") }
        _ = try? start(["/nonexistent/program"])
        let after = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count
        XCTAssertLessThanOrEqual(after, before, "descriptors before \(before), after \(after)")
    }

    func testTheLoopHoldsAtMostItsCapacityAndFreesASlotAtTheEnd() throws {
        let small = CommandIOLoop(capacity: 2)
        var processes: [CommandProcess] = []
        let completions = (0..<2).map { _ in Completion() }
        for completion in completions {
            processes.append(try CommandProcess.start(["sleep", "30"], input: [], outputLimit: 100, loop: small) { completion.report($0) })
        }
        XCTAssertThrowsError(try CommandProcess.start(["true"], input: [], outputLimit: 100, loop: small) { _ in }) { error in
            XCTAssertEqual((error as? PropBusError)?.code, .limitsExceeded)
            XCTAssertTrue((error as? PropBusError)?.message.contains("2 executions") == true, "\(error)")
        }
        processes[0].terminate(grace: 5)
        XCTAssertEqual(try XCTUnwrap(completions[0].wait(seconds: 5)).ending, .signaled(SIGTERM))
        let third = Completion()
        _ = try CommandProcess.start(["true"], input: [], outputLimit: 100, loop: small) { third.report($0) }
        XCTAssertEqual(try XCTUnwrap(third.wait(seconds: 5)).ending, .exited(0), "the ended run's slot was free again")
        processes[1].terminate(grace: 0)
        XCTAssertNotNil(completions[1].wait(seconds: 5))
    }

    // MARK: Output limit

    func testOutputLimitStopsTheProgram() throws {
        let started = Date()
        let outcome = try run(["yes"], outputLimit: 1000)
        XCTAssertLessThan(Date().timeIntervalSince(started), 2)
        XCTAssertEqual(outcome.ending, .outputTooLarge)
        XCTAssertEqual(outcome.output.count, 1000, "the output is cut at the limit")
        XCTAssertEqual(outcome.outputLimit, 1000)
        assertFailure(outcome.result(of: command), .limitsExceeded, containing: ["vm.search", "1000 bytes"])
    }

    func testOutputLimitStopsAFastWriter() throws {
        let started = Date()
        let outcome = try run(["cat", "/dev/zero"], outputLimit: 1 << 16)
        XCTAssertLessThan(Date().timeIntervalSince(started), 2)
        XCTAssertEqual(outcome.ending, .outputTooLarge)
        XCTAssertEqual(outcome.output.count, 1 << 16)
    }

    func testOutputAtTheLimitIsFine() throws {
        let outcome = try run(["head", "-c", "1000", "/dev/zero"], outputLimit: 1000)
        XCTAssertEqual(outcome.ending, .exited(0))
        XCTAssertEqual(outcome.output.count, 1000)
        let over = try run(["head", "-c", "1001", "/dev/zero"], outputLimit: 1000)
        XCTAssertEqual(over.ending, .outputTooLarge)
    }

    func testOutputLimitHoldsForAProgramThatExitsRightAfterWriting() throws {
        // Whatever the timing between the last write and the exit, more than the limit is refused.
        for _ in 0..<30 {
            let outcome = try run(["head", "-c", "5000", "/dev/zero"], outputLimit: 4000)
            XCTAssertEqual(outcome.ending, .outputTooLarge)
            XCTAssertLessThanOrEqual(outcome.output.count, 4000)
        }
    }

    func testOutputLimitKillsTheWholeGroup() throws {
        let pidFile = path("child.pid")
        let outcome = try run(["sh", "-c", "sleep 30 & echo $! > \"$0\"; yes", pidFile], outputLimit: 1000)
        XCTAssertEqual(outcome.ending, .outputTooLarge)
        let child = try pid(in: pidFile)
        XCTAssertTrue(eventually { Self.isDead(child) }, "the background child \(child) survived")
    }

    // MARK: Stopping

    func testTerminateStopsTheWholeGroupQuickly() throws {
        let pidFile = path("child.pid")
        let (process, completion) = try start(["sh", "-c", "sleep 30 & echo $! > \"$0\"; sleep 30", pidFile])
        let child = try pid(in: pidFile)
        XCTAssertFalse(Self.isDead(child))
        let started = Date()
        process.terminate(grace: 10)
        let outcome = try XCTUnwrap(completion.wait(seconds: 2), "SIGTERM did not stop the group")
        XCTAssertLessThan(Date().timeIntervalSince(started), 2)
        XCTAssertEqual(outcome.ending, .signaled(SIGTERM))
        XCTAssertTrue(eventually { Self.isDead(child) }, "the background child \(child) survived")
        XCTAssertTrue(Self.isDead(process.pid))
        process.terminate(grace: 0)  // after the end: a no-op, and no signal to a reused pid
    }

    func testProgramIgnoringSIGTERMIsKilledAfterTheGrace() throws {
        let readyFile = path("ready")
        // The trap is inherited: `sleep` ignores SIGTERM too.
        let (process, completion) = try start(["sh", "-c", "trap '' TERM; echo $$ > \"$0\"; sleep 30", readyFile])
        _ = try pid(in: readyFile)
        let started = Date()
        process.terminate(grace: 0.3)
        XCTAssertNil(completion.wait(seconds: 0.15), "SIGTERM is ignored: it must still run during the grace")
        let outcome = try XCTUnwrap(completion.wait(seconds: 2), "SIGKILL did not come after the grace")
        let elapsed = Date().timeIntervalSince(started)
        XCTAssertGreaterThanOrEqual(elapsed, 0.29)
        XCTAssertLessThan(elapsed, 1.5)
        XCTAssertEqual(outcome.ending, .signaled(SIGKILL))
        assertFailure(outcome.result(of: command), .executionFailed, containing: ["signal \(SIGKILL)"])
    }

    func testLeaderExitingWhileABackgroundChildHoldsStdoutCompletesPromptly() throws {
        let pidFile = path("child.pid")
        let started = Date()
        let outcome = try run(["sh", "-c", "sleep 30 & echo $! > \"$0\"; echo done", pidFile])
        XCTAssertLessThan(Date().timeIntervalSince(started), 1.5)
        XCTAssertEqual(outcome.ending, .exited(0))
        XCTAssertEqual(try outcome.result(of: command).get(), "done")
        let child = try pid(in: pidFile)
        XCTAssertTrue(eventually { Self.isDead(child) }, "the background child \(child) survived")
    }

    func testLeaderExitingKeepsOutputWrittenJustBefore() throws {
        // A child writes a lot and the leader exits as soon as the child is done.
        let outcome = try run(["sh", "-c", "head -c 200000 /dev/zero | tr '\\0' x; echo"])
        XCTAssertEqual(outcome.ending, .exited(0))
        XCTAssertEqual(outcome.output.count, 200_001)
    }

    /// A program may send its own output elsewhere (a log file) and keep working; closing its
    /// stdout and stderr is not an exit, and its real status must be reported.
    func testProgramThatRedirectsItsOutputRunsToItsEnd() throws {
        let marker = path("finished")
        let outcome = try run(["sh", "-c", "exec >/dev/null 2>&1; sleep 0.3; echo ok > \"$0\"; exit 0", marker])
        XCTAssertEqual(outcome.ending, .exited(0), "closing stdout and stderr must not get the program killed")
        XCTAssertTrue(FileManager.default.fileExists(atPath: marker), "the program was stopped before it finished its work")
    }

    func testProgramThatClosesItsOutputReportsItsExitStatus() throws {
        let outcome = try run(["sh", "-c", "exec >&- 2>&-; sleep 0.2; exit 4"])
        XCTAssertEqual(outcome.ending, .exited(4))
    }
}
