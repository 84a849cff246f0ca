import Etcd
@testable import PropBusService
import XCTest

/// The pure decisions behind the fleet's handling of etcd going back in time and of a log line
/// repeated while etcd is unreachable. (Issue 25.)
final class FleetRewindTests: XCTestCase {
    func testAnAnswerBelowTheMirrorsRevisionIsARewind() {
        let header = ResponseHeader(revision: 8, clusterID: 0xabc)
        XCTAssertEqual(FleetRewind.check(header, cursor: 38, clusterID: 0xabc), .revisionBelowMirror(etcd: 8, mirror: 38))
    }

    func testAnAnswerAtOrAboveTheMirrorsRevisionOfTheSameClusterIsNot() {
        XCTAssertNil(FleetRewind.check(ResponseHeader(revision: 38, clusterID: 0xabc), cursor: 38, clusterID: 0xabc))
        XCTAssertNil(FleetRewind.check(ResponseHeader(revision: 40, clusterID: 0xabc), cursor: 38, clusterID: 0xabc))
        // Nothing recorded yet: any cluster is the mirror's.
        XCTAssertNil(FleetRewind.check(ResponseHeader(revision: 40, clusterID: 0xdef), cursor: 38, clusterID: nil))
    }

    func testAnotherClusterIdIsARewindWhateverTheRevision() {
        XCTAssertEqual(FleetRewind.check(ResponseHeader(revision: 90, clusterID: 0xdef), cursor: 38, clusterID: 0xabc),
                       .otherCluster(etcd: 0xdef, mirror: 0xabc))
    }

    func testAnAnswerWithoutAHeaderTellsNothing() {
        XCTAssertNil(FleetRewind.check(ResponseHeader(revision: 0), cursor: 38, clusterID: 0xabc))
        XCTAssertFalse(FleetRewind.isSuspicious(revision: 0, cursor: 38))
    }

    func testAWatchBelowTheCursorIsOnlySuspicious() {
        XCTAssertTrue(FleetRewind.isSuspicious(revision: 1, cursor: 38))
        XCTAssertFalse(FleetRewind.isSuspicious(revision: 38, cursor: 38))
    }

    func testTheClusterIdIsReadFromTheRecordedSource() {
        XCTAssertEqual(FleetRewind.clusterID(ofSource: "/pb/@1f2e"), 0x1f2e)
        XCTAssertEqual(FleetRewind.clusterID(ofSource: "/a@b/@ff"), 0xff)
        XCTAssertNil(FleetRewind.clusterID(ofSource: "no cluster"))
    }

    func testAtStartTheSamePrefixInAnotherClusterIsARewindAndAnotherPrefixIsNot() {
        let header = ResponseHeader(revision: 90, clusterID: 0xdef)
        XCTAssertEqual(FleetRewind.check(source: "/pb/@abc", prefix: "/pb/", answeredBy: header), .otherCluster(etcd: 0xdef, mirror: 0xabc))
        XCTAssertNil(FleetRewind.check(source: "/pb/@def", prefix: "/pb/", answeredBy: header), "the same cluster")
        XCTAssertNil(FleetRewind.check(source: "/other/@abc", prefix: "/pb/", answeredBy: header), "another fleet")
        XCTAssertNil(FleetRewind.check(source: nil, prefix: "/pb/", answeredBy: header), "nothing recorded")
    }

    func testARepeatedLineGoesOutOncePerPeriodWithTheNumberHeldBack() {
        var throttle = LogThrottle(seconds: 10)
        let second: UInt64 = 1_000_000_000
        XCTAssertEqual(throttle.admit(at: 100 * second), 0)
        for tick in 1...9 { XCTAssertNil(throttle.admit(at: (100 + UInt64(tick)) * second)) }
        XCTAssertEqual(throttle.admit(at: 110 * second), 9)
        XCTAssertNil(throttle.admit(at: 111 * second))
    }

    func testAfterASuccessTheNextFailureIsLoggedAtOnce() {
        var throttle = LogThrottle(seconds: 10)
        XCTAssertEqual(throttle.admit(at: 1), 0)
        XCTAssertNil(throttle.admit(at: 2))
        throttle.reset()
        XCTAssertEqual(throttle.admit(at: 3), 0)
    }
}
