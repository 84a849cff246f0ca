import CommandLineKit
import XCTest
@testable import propctl

/// `--since`/`--until`/`--to` as `history` and `revert` read them, parsed by hand (no
/// Foundation in propctl): a revision, an RFC 3339 time, a date, or a time ago.
final class HistoryTimeTests: XCTestCase {
    private let now: Int64 = 1_796_119_200 * 1_000_000_000   // 2026-12-01T10:00:00Z

    private func parse(_ text: String) throws -> HistoryTime.Bound {
        try HistoryTime.parse(text, option: "--since", now: now)
    }

    func testARevisionIsAtSignAndDigitsOrBareDigits() throws {
        XCTAssertEqual(try parse("@42"), .revision(42))
        XCTAssertEqual(try parse("42"), .revision(42))
    }

    func testAnRFC3339TimeInUTCOrWithAnOffsetAndFractions() throws {
        XCTAssertEqual(try parse("2026-12-01T10:00:00Z"), .time(1_796_119_200 * 1_000_000_000))
        XCTAssertEqual(try parse("2026-12-01t10:00:00z"), .time(1_796_119_200 * 1_000_000_000))
        XCTAssertEqual(try parse("2026-12-01T10:00:00.5+02:00"), .time(1_796_112_000 * 1_000_000_000 + 500_000_000))
        XCTAssertEqual(try parse("2026-12-01 08:00:00-02:00"), .time(1_796_119_200 * 1_000_000_000))
        XCTAssertEqual(try parse("2024-02-29T23:59:59Z"), .time(1_709_251_199 * 1_000_000_000), "a leap day")
    }

    func testADateIsItsMidnightInUTC() throws {
        XCTAssertEqual(try parse("2026-12-01"), .time(1_796_083_200 * 1_000_000_000))
    }

    func testADateBeyondWhat64BitNanosecondsHoldIsClampedNotACrash() throws {
        XCTAssertEqual(try parse("2999-01-01"), .time(Int64.max))
        XCTAssertEqual(try parse("1000-01-01T00:00:00Z"), .time(Int64.min))
    }

    func testARelativeTimeIsThatLongAgo() throws {
        XCTAssertEqual(try parse("30s"), .time(now - 30 * 1_000_000_000))
        XCTAssertEqual(try parse("10m"), .time(now - 600 * 1_000_000_000))
        XCTAssertEqual(try parse("2h"), .time(now - 7200 * 1_000_000_000))
        XCTAssertEqual(try parse("3d"), .time(now - 3 * 86400 * 1_000_000_000))
    }

    func testNonsenseIsAUsageErrorNamingTheOptionAndTheForms() {
        for text in ["yesterday", "2026-13-01", "2026-02-30", "2026-12-01T25:00:00Z", "10x", "@", "-3d", "2026-12-01T10:00:00", ""] {
            XCTAssertThrowsError(try parse(text), text) { error in
                let failure = error as? CommandFailure
                XCTAssertEqual(failure?.code, .usage, text)
                XCTAssertTrue(failure?.message.contains("--since") == true, "\(String(describing: failure))")
                XCTAssertTrue(failure?.message.contains("@REV") == true && failure?.message.contains("2h") == true, "\(String(describing: failure))")
            }
        }
    }
}
