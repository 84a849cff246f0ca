import Glibc
import SystemKit
import XCTest

final class WallClockTimeTests: XCTestCase {
    /// Golden strings: what `Date.formatted(.iso8601…time(includingFractionalSeconds: true)
    /// .timeZone(separator: .omitted))` printed for these instants, which `watch --timestamps`
    /// used before propctl dropped Foundation. Fractions are truncated, not rounded.
    func testISO8601MatchesTheFormatWatchPrintedWithFoundation() {
        XCTAssertEqual(WallClockTime(seconds: 1_764_498_012, nanoseconds: 45_600_000).iso8601, "2025-11-30T10:20:12.045Z")
        XCTAssertEqual(WallClockTime(seconds: 1_764_498_012, nanoseconds: 999_600_000).iso8601, "2025-11-30T10:20:12.999Z")
        XCTAssertEqual(WallClockTime(seconds: 1_764_498_012, nanoseconds: 0).iso8601, "2025-11-30T10:20:12.000Z")
        XCTAssertEqual(WallClockTime(seconds: 0, nanoseconds: 1_000_000).iso8601, "1970-01-01T00:00:00.001Z")
        XCTAssertEqual(WallClockTime(seconds: 951_782_400 - 1, nanoseconds: 0).iso8601, "2000-02-28T23:59:59.000Z")
    }

    func testISO8601IsUTCWhateverTheTimeZone() {
        setenv("TZ", "Asia/Tokyo", 1)
        tzset()
        defer { unsetenv("TZ"); tzset() }
        XCTAssertEqual(WallClockTime(seconds: 1_764_498_012, nanoseconds: 0).iso8601, "2025-11-30T10:20:12.000Z")
    }

    func testNowIsTheSystemClock() {
        let before = time(nil)
        let now = WallClockTime.now()
        XCTAssertGreaterThanOrEqual(now.seconds, before)
        XCTAssertLessThanOrEqual(now.seconds, time(nil))
        XCTAssertTrue((0..<1_000_000_000).contains(now.nanoseconds))
    }
}
