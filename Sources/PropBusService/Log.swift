import Dispatch
import Glibc
import Synchronization

/// The daemon's one log: lines on stderr, which the journal keeps (the unit supplies
/// `SYSLOG_IDENTIFIER`, so lines carry no timestamp or name of their own beyond the
/// `propbusd:` prefix that also reads well on a terminal). The service and the daemon both write
/// through it.
public enum Log {
    /// One event (start, ready, reload, stop, a binding suspended, a fleet change): one line.
    public static func info(_ message: String) {
        write("propbusd: \(message)\n")
    }

    /// Store failures, at most one line every ``interval`` seconds, with the number left out in
    /// between, so a full disk under heavy writes cannot flood the journal.
    public static func storeFailure(_ message: String) {
        limiter.run { suppressed in
            let more = suppressed > 0 ? " (\(suppressed) more store failures since the last line)" : ""
            write("propbusd: store failure: \(message)\(more)\n")
        }
    }

    /// Writes `text` (which ends with a newline) to stderr as it is, unbuffered and in one
    /// `write(2)` where the pipe takes it, so it is neither lost when the daemon exits right
    /// after nor interleaved with another thread's line.
    public static func write(_ text: String) {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeMutableBytes { Glibc.write(2, $0.baseAddress! + offset, $0.count - offset) }
            guard written > 0 else { return }
            offset += written
        }
    }

    /// The shortest time between two store failure lines, in seconds.
    public static let interval: UInt64 = 10

    private static let limiter = RateLimiter(seconds: interval)
}

/// Lets an action through at most once per period, counting what it held back.
///
/// `Sendable` without `@unchecked`: its two counters live in a `Mutex`, which also keeps two
/// threads' actions from interleaving.
final class RateLimiter: Sendable {
    private struct Counters {
        var last: UInt64?
        var suppressed = 0
    }

    private let period: UInt64
    private let counters = Mutex(Counters())

    init(seconds: UInt64) {
        period = seconds * 1_000_000_000
    }

    /// Runs `action` (with the number held back since the last run) unless one ran within the period.
    func run(_ action: (Int) -> Void) {
        counters.withLock { counters in
            let now = DispatchTime.now().uptimeNanoseconds
            if let last = counters.last, now - last < period {
                counters.suppressed += 1
                return
            }
            counters.last = now
            action(counters.suppressed)
            counters.suppressed = 0
        }
    }
}
