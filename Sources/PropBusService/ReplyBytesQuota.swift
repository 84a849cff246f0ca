import DBus
import Dispatch
import PropBus

/// The bytes each principal may make the daemon send within a sliding window
/// (`--max-reply-bytes-per-uid` per ``windowNanoseconds``): the replies it is sent, and the
/// signals its calls cause (a write's `PropertiesChanged`, an execution's `Finished`). Past it,
/// a reply is refused with `LimitsExceeded` instead of being queued, and so is a call that
/// would write or start something.
///
/// Why: dbus-daemon holds the messages a receiver has not read yet against the daemon's own
/// connection (a signal until every subscriber read it), and stops reading from the daemon past
/// its `max_incoming_bytes`; a caller that sends big calls and never reads, or writes big values
/// while subscribed on connections it never reads, would make every other client wait. The
/// daemon cannot see what was read, only what it sent, so what one principal can make the bus
/// hold is bounded by what it may cause to be sent per window. The principal is the caller's
/// uid (all its connections together) where callers are checked; without access control (a
/// session bus: no credentials, one user), the calling connection. Root and the daemon's user
/// are not charged.
///
/// Confined to the service's queue, like the service.
struct ReplyBytesQuota {
    /// Who is charged.
    enum Principal: Hashable, CustomStringConvertible {
        case uid(UInt32)
        case connection(String)

        var description: String {
            switch self {
            case .uid(let uid): "uid \(uid)"
            case .connection(let name): "connection \(name)"
            }
        }
    }

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

    private var usage: [Principal: Usage] = [:]

    /// The uids remembered now (a test's view of the bound).
    var trackedUsers: Int { usage.count }

    init(limit: Int) {
        self.limit = limit
    }

    /// Charges `bytes` to `principal` at `now` (nanoseconds of a monotonic clock) and returns
    /// `nil`, or, when they do not fit, charges nothing and returns the bytes it was sent in the
    /// window. With `regardless`, charges them even past the quota (what was sent already: a
    /// signal) and returns `nil`.
    mutating func charge(_ bytes: Int, to principal: Principal, now: UInt64, regardless: Bool = false) -> Int? {
        var entry = current(principal, now: now)
        let used = Self.used(entry, now: now)
        defer { usage[principal] = entry }
        guard regardless || used + bytes <= limit else { return used }
        entry.current += bytes
        if usage.count > Self.keptUsers { forgetIdle(now: now) }
        return nil
    }

    /// What `principal` was sent in the window up to `now`.
    func used(by principal: Principal, now: UInt64) -> Int {
        usage[principal].map { Self.used(current($0, now: now), now: now) } ?? 0
    }

    /// `principal`'s entry with its windows moved on to `now`.
    private func current(_ principal: Principal, now: UInt64) -> Usage {
        current(usage[principal] ?? Usage(windowStart: now), now: now)
    }

    private func current(_ entry: Usage, now: UInt64) -> Usage {
        let window = Self.windowNanoseconds
        let elapsed = now &- entry.windowStart
        if elapsed >= 2 * window { return Usage(windowStart: now) }
        if elapsed >= window { return Usage(windowStart: entry.windowStart + window, current: 0, previous: entry.current) }
        return entry
    }

    /// The bytes an entry counts at `now`: this window's, and the part of the last one still
    /// inside the sliding window.
    private static func used(_ entry: Usage, now: UInt64) -> Int {
        let window = windowNanoseconds
        let left = Double(window - min(window, now &- entry.windowStart)) / Double(window)
        return Int(Double(entry.previous) * left) + entry.current
    }

    /// Forgets the uids charged nothing in the last two windows: they count as zero anyway.
    private mutating func forgetIdle(now: UInt64) {
        usage = usage.filter { now &- $0.value.windowStart < 2 * Self.windowNanoseconds }
    }

    /// `LimitsExceeded` for a reply of `size` bytes to `principal`, who was sent `used` bytes in the window.
    func refusal(size: Int, principal: Principal, used: Int) -> DBusError {
        PropBusError(.limitsExceeded, "\(principal) was sent \(used) bytes of replies and of signals its calls caused in the last \(Self.windowNanoseconds / 1_000_000_000) s; "
            + "this reply of \(size) bytes would pass the reply quota of \(limit) bytes per uid (--max-reply-bytes-per-uid): "
            + "read the replies already sent, wait, or ask for less at once").dbusError
    }

    /// `LimitsExceeded` for a call that would write or start something, from `principal`, who
    /// was sent `used` bytes in the window: past the quota, a caller causes nothing more.
    func refusal(of member: String, principal: Principal, used: Int) -> DBusError {
        PropBusError(.limitsExceeded, "\(principal) was sent \(used) bytes of replies and of signals its calls caused in the last \(Self.windowNanoseconds / 1_000_000_000) s, "
            + "past the reply quota of \(limit) bytes per uid (--max-reply-bytes-per-uid); \(member) is refused, nothing changed: "
            + "read what was sent, or wait").dbusError
    }
}
