import DBus
import Dispatch
import PropBus

/// The bytes of replies each uid may be sent within a sliding window (`--max-reply-bytes-per-uid`
/// per ``windowNanoseconds``), past which a reply is refused with `LimitsExceeded` instead of
/// being queued.
///
/// Why: dbus-daemon holds the replies a caller has not read yet against the daemon's own
/// connection, and stops reading from the daemon past its `max_incoming_bytes`; a caller that
/// sends big calls and never reads would make every other client wait. The daemon cannot see
/// what a caller has read, only what it sent it, so what one uid can make the bus hold is bounded
/// by what it may be sent per window. The principal is the caller's uid (all its connections
/// together); root and the daemon's user are not charged.
///
/// Confined to the service's queue, like the service.
struct ReplyBytesQuota {
    /// The bytes one uid may be sent per window.
    let limit: Int
    /// The window: ten seconds.
    static let windowNanoseconds: UInt64 = 10_000_000_000
    /// Uids remembered before idle ones are forgotten.
    static let keptUsers = 1024

    /// One uid's charges: this window's and the one before, which counts for the part of it
    /// still inside the sliding window.
    private struct Usage {
        var windowStart: UInt64
        var current = 0
        var previous = 0
    }

    private var usage: [UInt32: Usage] = [:]

    /// The uids remembered now (a test's view of the bound).
    var trackedUsers: Int { usage.count }

    init(limit: Int) {
        self.limit = limit
    }

    /// Charges `bytes` to `uid` at `now` (nanoseconds of a monotonic clock) and returns `nil`, or,
    /// when they do not fit, charges nothing and returns the bytes the uid was sent in the window.
    mutating func charge(_ bytes: Int, to uid: UInt32, now: UInt64) -> Int? {
        let window = Self.windowNanoseconds
        var entry = usage[uid] ?? Usage(windowStart: now)
        let elapsed = now &- entry.windowStart
        if elapsed >= 2 * window {
            entry = Usage(windowStart: now)
        } else if elapsed >= window {
            entry = Usage(windowStart: entry.windowStart + window, current: 0, previous: entry.current)
        }
        let left = Double(window - min(window, now &- entry.windowStart)) / Double(window)
        let used = Int(Double(entry.previous) * left) + entry.current
        defer { usage[uid] = entry }
        guard used + bytes <= limit else { return used }
        entry.current += bytes
        if usage.count > Self.keptUsers { forgetIdle(now: now) }
        return nil
    }

    /// Forgets the uids charged nothing in the last two windows: they count as zero anyway.
    private mutating func forgetIdle(now: UInt64) {
        usage = usage.filter { now &- $0.value.windowStart < 2 * Self.windowNanoseconds }
    }

    /// `LimitsExceeded` for a reply of `size` bytes to `uid`, who was sent `used` bytes in the window.
    func refusal(size: Int, uid: UInt32, used: Int) -> DBusError {
        PropBusError(.limitsExceeded, "uid \(uid) was sent \(used) bytes of replies in the last \(Self.windowNanoseconds / 1_000_000_000) s; "
            + "this reply of \(size) bytes would pass the reply quota of \(limit) bytes per uid (--max-reply-bytes-per-uid): "
            + "read the replies already sent, wait, or ask for less at once").dbusError
    }
}
