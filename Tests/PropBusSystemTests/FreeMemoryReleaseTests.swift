import PropBusSystem
import XCTest

/// The policy behind the service's release of freed memory after bursts (memory).
final class FreeMemoryReleaseTests: XCTestCase {
    func testOneReleaseIsDueOnceTheThresholdIsReachedAndCountingStartsAgainAfterIt() {
        var policy = FreeMemoryRelease(threshold: 100)
        policy.count(60)
        XCTAssertFalse(policy.becameDue())
        policy.count(40)
        XCTAssertTrue(policy.becameDue(), "100 units: a release is due")
        policy.count(500)
        XCTAssertFalse(policy.becameDue(), "one release at a time")
        XCTAssertTrue(policy.isDue)
        policy.released()
        XCTAssertEqual(policy.countSinceRelease, 0)
        policy.count(99)
        XCTAssertFalse(policy.becameDue())
        policy.count(1)
        XCTAssertTrue(policy.becameDue())
    }

    func testTheReleaseWaitsUntilAQuietPeriodSeesNoMoreWork() {
        var policy = FreeMemoryRelease(threshold: 10)
        policy.count(10)
        XCTAssertTrue(policy.becameDue())
        policy.count(1)
        XCTAssertFalse(policy.isQuiet(), "work came after the release became due: the burst goes on")
        XCTAssertTrue(policy.isQuiet(), "nothing since the last look")
        policy.released()
        XCTAssertFalse(policy.isDue)
    }

    func testOneBigRoundIsEnoughAndIsQuietAtOnce() {
        var policy = FreeMemoryRelease()
        policy.count(20_000)
        XCTAssertTrue(policy.becameDue())
        XCTAssertTrue(policy.isQuiet())
    }

    func testReleasingWhenNothingIsFreeIsHarmless() {
        FreeMemoryRelease.releaseNow()
        FreeMemoryRelease.releaseNow()
    }
}
