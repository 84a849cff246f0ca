@testable import PropBusService
import XCTest

/// ``ReplyBytesQuota``: reply bytes charged to a uid over a sliding window.
final class ReplyBytesQuotaWindowTests: XCTestCase {
    private let second: UInt64 = 1_000_000_000
    private let start: UInt64 = 1_000 * 1_000_000_000

    func testRepliesFitUntilTheQuotaThenAreRefusedWithoutBeingCharged() {
        var quota = ReplyBytesQuota(limit: 100)
        XCTAssertNil(quota.charge(60, to: .uid(7), now: start))
        XCTAssertNil(quota.charge(40, to: .uid(7), now: start + second))
        XCTAssertEqual(quota.charge(1, to: .uid(7), now: start + 2 * second), 100)
        // A refused reply is not charged: the next one that fits is still refused only by what was sent.
        XCTAssertEqual(quota.charge(1, to: .uid(7), now: start + 2 * second), 100)
    }

    func testEachUidHasItsOwnQuota() {
        var quota = ReplyBytesQuota(limit: 100)
        XCTAssertNil(quota.charge(100, to: .uid(7), now: start))
        XCTAssertNil(quota.charge(100, to: .uid(8), now: start))
        XCTAssertNotNil(quota.charge(1, to: .uid(7), now: start))
    }

    func testTheWindowSlides() {
        var quota = ReplyBytesQuota(limit: 100)
        XCTAssertNil(quota.charge(100, to: .uid(7), now: start))
        // Half a window after the window that charged it, half of it still counts.
        let window = ReplyBytesQuota.windowNanoseconds
        XCTAssertEqual(quota.charge(60, to: .uid(7), now: start + window + window / 2), 50)
        XCTAssertNil(quota.charge(50, to: .uid(7), now: start + window + window / 2))
        // Two windows on, nothing counts.
        XCTAssertNil(quota.charge(100, to: .uid(7), now: start + 4 * window))
    }

    func testTheRefusalNamesTheQuotaTheUidAndWhatWasSent() {
        let quota = ReplyBytesQuota(limit: 100)
        let error = quota.refusal(size: 30, principal: .uid(65534), used: 90)
        XCTAssertEqual(error.name, "org.propbus.PropBus1.Error.LimitsExceeded")
        for fragment in ["uid 65534", "90 bytes", "30 bytes", "100 bytes", "--max-reply-bytes-per-uid"] {
            XCTAssertTrue(error.message.contains(fragment), "\(fragment): \(error.message)")
        }
    }

    func testIdleUidsAreForgotten() {
        var quota = ReplyBytesQuota(limit: 100)
        for uid in 0..<UInt32(ReplyBytesQuota.keptUsers + 10) { _ = quota.charge(1, to: .uid(uid), now: start) }
        let later = start + 3 * ReplyBytesQuota.windowNanoseconds
        XCTAssertNil(quota.charge(1, to: .uid(5000), now: later))
        XCTAssertLessThanOrEqual(quota.trackedUsers, 2)
    }
}
