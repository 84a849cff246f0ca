import Dispatch
import XCTest
@testable import propbusd

/// The runner alone, without I/O: components that only record what was asked of them.
final class LifecycleTests: XCTestCase {
    /// What the components and the runner did, in order; used only on the test's queue.
    private final class Journal {
        var events: [String] = []
    }

    /// A component that records its start and stop, and fails or hangs when told to.
    private final class Recorder: Component {
        let name: String
        let journal: Journal
        let failsToStart: LifecycleError?
        let hangsOnStop: Bool
        let stopError: LifecycleError?
        let stopTimeout: DispatchTimeInterval?

        init(_ name: String, _ journal: Journal, failsToStart: LifecycleError? = nil, hangsOnStop: Bool = false,
             stopError: LifecycleError? = nil, stopTimeout: DispatchTimeInterval? = nil) {
            self.name = name
            self.journal = journal
            self.failsToStart = failsToStart
            self.hangsOnStop = hangsOnStop
            self.stopError = stopError
            self.stopTimeout = stopTimeout
        }

        func start(_ done: @escaping (Result<Void, LifecycleError>) -> Void) {
            journal.events.append("start \(name)")
            if let failsToStart { return done(.failure(failsToStart)) }
            done(.success(()))
        }

        func stop(_ done: @escaping (LifecycleError?) -> Void) {
            journal.events.append("stop \(name)")
            // A stop that hangs never answers: only the runner's bound moves on.
            guard !hangsOnStop else { return }
            done(stopError)
        }
    }

    private let queue = DispatchQueue(label: "LifecycleTests")

    /// Starts `components` on the queue, asks for shutdown once started if `shutsDown`, and
    /// returns the journal and the exit status once the runner has finished.
    private func run(_ make: (Journal) -> [Component], shutsDown: Bool = true) -> (events: [String], status: Int32) {
        let finished = expectation(description: "finished")
        let journal = Journal()
        var lifecycle: Lifecycle?
        var status: Int32?
        queue.sync {
            let runner = Lifecycle(make(journal), queue: queue, log: { journal.events.append("log \($0)") })
            lifecycle = runner
            runner.start(finished: { code in
                status = code
                finished.fulfill()
            })
            if shutsDown { runner.shutdown() }
        }
        wait(for: [finished], timeout: 30)
        return queue.sync {
            _ = lifecycle
            return (journal.events.filter { !$0.hasPrefix("log ") }, status ?? -1)
        }
    }

    func testStartsInOrderAndStopsInReverseOrder() {
        let (events, status) = run { journal in ["lock", "store", "bus", "name"].map { Recorder($0, journal) } }
        XCTAssertEqual(events, ["start lock", "start store", "start bus", "start name",
                                "stop name", "stop bus", "stop store", "stop lock"])
        XCTAssertEqual(status, 0)
    }

    func testAFailedStartStopsOnlyTheComponentsStartedBefore() {
        let refused = LifecycleError(code: 1, message: "the name is already owned")
        let (events, status) = run({ journal in
            [Recorder("lock", journal), Recorder("store", journal), Recorder("name", journal, failsToStart: refused),
             Recorder("fleet", journal)]
        }, shutsDown: false)
        XCTAssertEqual(events, ["start lock", "start store", "start name", "stop store", "stop lock"])
        XCTAssertEqual(status, 1, "the failed start's code is the exit status")
    }

    func testAStopThatHangsIsBoundedAndTheOthersStillStop() {
        let (events, status) = run { journal in
            [Recorder("lock", journal), Recorder("name", journal, hangsOnStop: true, stopTimeout: .milliseconds(20)),
             Recorder("serving", journal)]
        }
        XCTAssertEqual(events, ["start lock", "start name", "start serving", "stop serving", "stop name", "stop lock"])
        XCTAssertEqual(status, 0)
    }

    func testAFailedStopGivesTheExitStatusAndTheRestStillStop() {
        let lost = LifecycleError(code: 1, message: "the final commit failed")
        let (events, status) = run { journal in
            [Recorder("store", journal), Recorder("commit", journal, stopError: lost), Recorder("serving", journal)]
        }
        XCTAssertEqual(events, ["start store", "start commit", "start serving", "stop serving", "stop commit", "stop store"])
        XCTAssertEqual(status, 1)
    }

    func testEachStepIsLogged() {
        let finished = expectation(description: "finished")
        let journal = Journal()
        var lifecycle: Lifecycle?
        queue.sync {
            let runner = Lifecycle([Recorder("lock", journal), Recorder("store", journal)], queue: queue,
                                   log: { journal.events.append("log \($0)") })
            lifecycle = runner
            runner.start(finished: { _ in finished.fulfill() })
            runner.shutdown()
        }
        wait(for: [finished], timeout: 30)
        let logged = queue.sync { _ = lifecycle; return journal.events.filter { $0.hasPrefix("log ") }.count }
        XCTAssertEqual(logged, 4, "one line per start and per stop")
    }

    /// A shutdown asked for while a component is still starting (a connection being made) does
    /// not wait for it: what has started stops, and the late answer changes nothing.
    func testAShutdownDuringAStartStopsWhatStartedAndIgnoresTheLateAnswer() {
        final class Pending: Component {
            let name = "bus"
            let journal: Journal
            var answer: ((Result<Void, LifecycleError>) -> Void)?
            init(_ journal: Journal) { self.journal = journal }
            func start(_ done: @escaping (Result<Void, LifecycleError>) -> Void) {
                journal.events.append("start bus")
                answer = done
            }
            func stop(_ done: @escaping (LifecycleError?) -> Void) {
                journal.events.append("stop bus")
                done(nil)
            }
        }
        let finished = expectation(description: "finished")
        let journal = Journal()
        var status: Int32?
        var lifecycle: Lifecycle?
        queue.sync {
            let pending = Pending(journal)
            let runner = Lifecycle([Recorder("lock", journal), pending, Recorder("name", journal)], queue: queue, log: { _ in })
            lifecycle = runner
            runner.start(finished: { code in
                status = code
                finished.fulfill()
            })
            runner.shutdown()
            pending.answer?(.success(()))
        }
        wait(for: [finished], timeout: 30)
        queue.sync {
            _ = lifecycle
            XCTAssertEqual(journal.events, ["start lock", "start bus", "stop lock"])
            XCTAssertEqual(status, 0)
        }
    }
}
