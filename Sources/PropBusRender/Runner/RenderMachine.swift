/// When one render runs, as a pure state machine (events in, actions out; no clock, timer or
/// file): the quiescence of its `wait`, one run at a time, and the changes that come during a run.
///
/// - A change arms the render for when its keys have been quiet for `wait.minimum`, and no
///   later than `wait.maximum` after the first change it has not rendered yet; with no wait
///   it runs at once.
/// - While a run is in flight, changes are remembered: when it ends, the next run is due by
///   the same rule (the run read the values of its start, which they may have passed).
/// - A run asked for (`propctl render run`) starts at once, or right after the one in flight.
public struct RenderMachine: Sendable, Equatable {
    public enum Event: Sendable, Equatable {
        /// A key the render reads changed (nanoseconds on a monotonic clock).
        case changed(now: UInt64)
        /// The deadline last armed has come.
        case deadline(now: UInt64)
        /// Someone asked for a run now.
        case runRequested(now: UInt64)
        /// The run in flight ended.
        case finished(now: UInt64)
    }

    public enum Action: Sendable, Equatable {
        /// Start a run now.
        case start
        /// Send a ``Event/deadline(now:)`` at this time (replacing the one armed before).
        case arm(at: UInt64)
    }

    public var wait: RenderWait
    /// Whether a run is in flight.
    public private(set) var running = false
    /// The first and last change not rendered yet.
    private var firstChange: UInt64?
    private var lastChange: UInt64?
    /// A run was asked for during the one in flight.
    private var requested = false

    public init(wait: RenderWait) {
        self.wait = wait
    }

    public mutating func handle(_ event: Event) -> [Action] {
        switch event {
        case .changed(let now):
            firstChange = firstChange ?? now
            lastChange = now
            return running ? [] : due(now: now)
        case .deadline(let now):
            return running ? [] : due(now: now)
        case .runRequested:
            if running {
                requested = true
                return []
            }
            return start()
        case .finished(let now):
            running = false
            if requested {
                requested = false
                return start()
            }
            return due(now: now)
        }
    }

    /// When changes wait, the run now or the deadline to arm.
    private mutating func due(now: UInt64) -> [Action] {
        guard let first = firstChange, let last = lastChange else { return [] }
        let deadline = Swift.min(last &+ wait.minimum, first &+ wait.maximum)
        return deadline <= now ? start() : [.arm(at: deadline)]
    }

    private mutating func start() -> [Action] {
        running = true
        firstChange = nil
        lastChange = nil
        return [.start]
    }
}
