import Glibc

/// A point in UTC wall-clock time, from `clock_gettime(CLOCK_REALTIME)`.
public struct WallClockTime: Hashable, Sendable {
    /// Seconds since the Unix epoch.
    public var seconds: Int
    /// Nanoseconds within the second, 0 ..< 1_000_000_000.
    public var nanoseconds: Int

    /// A time from its parts.
    public init(seconds: Int, nanoseconds: Int) {
        self.seconds = seconds
        self.nanoseconds = nanoseconds
    }

    /// The current time (`clock_gettime(CLOCK_REALTIME)`).
    public static func now() -> WallClockTime {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return WallClockTime(seconds: now.tv_sec, nanoseconds: now.tv_nsec)
    }

    /// ISO 8601 in UTC with milliseconds, e.g. `2025-11-30T10:20:12.045Z` (`gmtime_r`): the
    /// format `Date.ISO8601FormatStyle` gave with fractional seconds, which truncates them.
    public var iso8601: String {
        var time = time_t(seconds)
        var utc = tm()
        gmtime_r(&time, &utc)
        func padded(_ value: Int, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return padded(Int(utc.tm_year) + 1900, 4) + "-" + padded(Int(utc.tm_mon) + 1, 2) + "-" + padded(Int(utc.tm_mday), 2)
            + "T" + padded(Int(utc.tm_hour), 2) + ":" + padded(Int(utc.tm_min), 2) + ":" + padded(Int(utc.tm_sec), 2)
            + "." + padded(nanoseconds / 1_000_000, 3) + "Z"
    }
}
