import Dispatch
import SystemKit

/// Why a component could not start, or did not stop cleanly: the line to log and the exit
/// status the daemon ends with.
struct LifecycleError: Error, Equatable {
    /// The exit status (propbusd exits 1 for every failure of start-up or shutdown).
    var code: Int32
    var message: String
}

/// One piece of the daemon that starts and stops: the state directory's lock, the store, the
/// bus connection, the name, ... (swift-service-lifecycle's services, on one serial queue).
///
/// Both methods run on the ``Lifecycle``'s queue and answer there, once; a piece whose work
/// happens elsewhere (a D-Bus round trip) hops back to the queue before it answers, so the
/// next piece starts in the same turn of the queue as the answer.
protocol Component: AnyObject {
    /// For the log: what starts and stops.
    var name: String { get }
    /// How long ``stop(_:)`` may take before the runner goes on without it; `nil` for a stop
    /// that cannot hang (no I/O it waits for).
    var stopTimeout: DispatchTimeInterval? { get }
    /// Starts; answers once, with why not on failure.
    func start(_ done: @escaping (Result<Void, LifecycleError>) -> Void)
    /// Stops what ``start(_:)`` started; answers once, with an error if the stop lost something
    /// (its code becomes the exit status).
    func stop(_ done: @escaping (LifecycleError?) -> Void)
}

extension Component {
    var stopTimeout: DispatchTimeInterval? { nil }
}

/// A component made of two closures: how the daemon writes its pieces without a type for each.
final class Step: Component {
    let name: String
    let stopTimeout: DispatchTimeInterval?
    private let starting: (@escaping (Result<Void, LifecycleError>) -> Void) -> Void
    private let stopping: (@escaping (LifecycleError?) -> Void) -> Void

    /// A step whose start and stop may answer later (a bus round trip).
    init(_ name: String, stopTimeout: DispatchTimeInterval? = nil,
         start: @escaping (@escaping (Result<Void, LifecycleError>) -> Void) -> Void,
         stop: @escaping (@escaping (LifecycleError?) -> Void) -> Void = { $0(nil) }) {
        self.name = name
        self.stopTimeout = stopTimeout
        self.starting = start
        self.stopping = stop
    }

    /// A step whose start and stop are done when they return.
    convenience init(_ name: String, start: @escaping () throws(LifecycleError) -> Void,
                     stop: @escaping () throws(LifecycleError) -> Void = {}) {
        self.init(name, start: { done in
            done(Result { () throws(LifecycleError) in try start() })
        }, stop: { done in
            do throws(LifecycleError) { try stop(); done(nil) } catch { done(error) }
        })
    }

    func start(_ done: @escaping (Result<Void, LifecycleError>) -> Void) { starting(done) }
    func stop(_ done: @escaping (LifecycleError?) -> Void) { stopping(done) }
}

/// Starts components in order, and stops the ones started in reverse order: after a start
/// fails, or on ``shutdown()``. Each stop that can hang is bounded by its ``Component/stopTimeout``.
/// Once everything started is stopped, `finished` gets the exit status: the code of the first
/// failure (of a start or a stop), else 0.
///
/// Confined to `queue`: made, started and shut down there. A shutdown asked for while a piece
/// is still starting does not wait for it: that piece never counts as started, and its late
/// answer is ignored (the process exits, which undoes whatever it got).
final class Lifecycle {
    let queue: DispatchQueue
    private let components: [Component]
    private let log: (String) -> Void
    /// The ones started, in start order: stopped from the last.
    private var started: [Component] = []
    private enum State { case idle, starting, running, stopping, finished }
    private var state = State.idle
    /// Which answer the runner waits for: a start's or a stop's answer (or a stop's bound)
    /// counts only if it carries the current turn, so a late or second answer changes nothing.
    private var turn = 0
    private var failure: LifecycleError?
    private var finished: ((Int32) -> Void)?

    init(_ components: [Component], queue: DispatchQueue, log: @escaping (String) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        self.components = components
        self.queue = queue
        self.log = log
    }

    /// Starts the components one after the other; `finished` gets the exit status once the
    /// started ones are stopped again (after a failed start, or ``shutdown()``).
    func start(finished: @escaping (Int32) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard state == .idle else { return }
        self.finished = finished
        state = .starting
        startNext()
    }

    /// Whether every component has started.
    var isRunning: Bool { state == .running }

    /// Stops what has started, in reverse order; once only.
    func shutdown() {
        dispatchPrecondition(condition: .onQueue(queue))
        switch state {
        case .starting, .running: stopNext(after: nil)
        case .idle, .stopping, .finished: break
        }
    }

    private func startNext() {
        guard state == .starting else { return }
        guard started.count < components.count else {
            state = .running
            return
        }
        let component = components[started.count]
        turn += 1
        let expected = turn
        log("starting \(component.name)")
        component.start { [self] result in
            dispatchPrecondition(condition: .onQueue(queue))
            guard state == .starting, turn == expected else { return }
            switch result {
            case .success:
                started.append(component)
                startNext()
            case .failure(let error):
                log(error.message)
                failure = failure ?? error
                stopNext(after: nil)
            }
        }
    }

    /// Stops the last component still started, or finishes; `error` is the previous stop's.
    private func stopNext(after error: LifecycleError?) {
        state = .stopping
        turn += 1
        if let error {
            log(error.message)
            failure = failure ?? error
        }
        guard let component = started.popLast() else {
            state = .finished
            let finished = self.finished
            self.finished = nil
            finished?(failure?.code ?? 0)
            return
        }
        let expected = turn
        log("stopping \(component.name)")
        component.stop { [self] error in
            dispatchPrecondition(condition: .onQueue(queue))
            guard turn == expected else { return }
            stopNext(after: error)
        }
        if let timeout = component.stopTimeout, turn == expected {
            let runner = LoopBound(self, on: queue)
            let name = component.name
            queue.asyncAfter(deadline: .now() + timeout) {
                let lifecycle = runner.value
                guard lifecycle.turn == expected else { return }
                lifecycle.log("\(name) did not stop in time; going on without it")
                lifecycle.stopNext(after: nil)
            }
        }
    }
}
