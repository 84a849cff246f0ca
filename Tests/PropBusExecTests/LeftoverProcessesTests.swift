import Dispatch
import Glibc
import Synchronization
import XCTest

@testable import PropBus
@testable import PropBusExec

/// How the daemon finds what an execution left behind: its children in /proc, each one's
/// `PROPBUS_EXECUTION_ID`, and zombies to reap.
final class LeftoverProcessesTests: XCTestCase {
    func testAChildIsMatchedToItsExecutionAndKilledOnceThatExecutionIsNotRunning() throws {
        let done = DispatchSemaphore(value: 0)
        let ending = Mutex<CommandProcess.Ending?>(nil)
        let process = try CommandProcess.start(["sleep", "30"], input: [], environment: ["PROPBUS_EXECUTION_ID": "4242"],
                                               outputLimit: 100, loop: CommandIOLoop(capacity: 1)) { outcome in
            ending.withLock { $0 = outcome.ending }
            done.signal()
        }
        XCTAssertTrue(LeftoverProcesses.children(of: getpid()).contains(process.pid))
        XCTAssertEqual(LeftoverProcesses.executionID(of: process.pid), 4242)
        XCTAssertFalse(LeftoverProcesses.isZombie(process.pid))
        // Its execution still runs: left alone (and so is everything else, tagged or not).
        XCTAssertEqual(LeftoverProcesses.sweep(running: [4242], leaders: []), 0)
        // Another one runs, but not 4242: it is a leftover.
        XCTAssertEqual(LeftoverProcesses.sweep(running: [1], leaders: []), 1)
        XCTAssertEqual(done.wait(timeout: .now() + 5), .success)
        XCTAssertEqual(ending.withLock { $0 }, .signaled(SIGKILL))
    }

    func testZombieIsRecognisedFromItsStat() throws {
        var pid: pid_t = 0
        var argv: [UnsafeMutablePointer<CChar>?] = [strdup("true"), nil]
        defer { free(argv[0]) }
        XCTAssertEqual(posix_spawnp(&pid, "true", nil, nil, &argv, environ), 0)
        var info = siginfo_t()
        XCTAssertEqual(waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT), 0)
        XCTAssertTrue(LeftoverProcesses.isZombie(pid))
        var status: Int32 = 0
        XCTAssertEqual(waitpid(pid, &status, 0), pid)
        XCTAssertFalse(LeftoverProcesses.isZombie(pid))
    }
}
