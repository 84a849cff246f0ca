import Etcd
@testable import PropBusFleet
@testable import PropBusService
import XCTest

/// The pure decisions behind the fleet's handling of etcd going back in time and of a log line
/// repeated while etcd is unreachable.
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

    func testAMemberAnsweringAtALowerRaftTermThanItShowedBeforeIsARewind() {
        let restored = ResponseHeader(revision: 90, clusterID: 0xabc, memberID: 0x11, raftTerm: 2)
        XCTAssertEqual(FleetRewind.check(restored, cursor: 38, clusterID: 0xabc, terms: [0x11: 7]),
                       .memberTermBelow(member: 0x11, etcd: 2, seen: 7))
        XCTAssertNil(FleetRewind.check(restored, cursor: 38, clusterID: 0xabc, terms: [0x11: 2]), "the same term")
        XCTAssertNil(FleetRewind.check(restored, cursor: 38, clusterID: 0xabc, terms: [0x22: 7]), "another member counts its own terms")
        XCTAssertNil(FleetRewind.check(ResponseHeader(revision: 90, clusterID: 0xabc), cursor: 38, clusterID: 0xabc, terms: [0: 7]),
                     "a header naming no member tells nothing")
    }

    func testACompactRevisionBelowOneSeenBeforeIsARewind() {
        XCTAssertEqual(FleetRewind.check(compactRevision: 5, seen: 30), .compactionBelowSeen(etcd: 5, seen: 30))
        XCTAssertNil(FleetRewind.check(compactRevision: 30, seen: 30))
        XCTAssertNil(FleetRewind.check(compactRevision: 31, seen: 30))
        XCTAssertNil(FleetRewind.check(compactRevision: 5, seen: 0), "none seen yet")
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

    /// A wiped etcd written back up to the watch's cursor by other hosts: no answer is below the
    /// cursor, but this host's own txn was answered past it. The highest revision it saw, in
    /// any answer or recorded for a key, is what etcd may not go below.
    func testTheRevisionEtcdMayNotGoBelowIsTheHighestThisHostSaw() {
        let own = FleetRevisions(value: 6, definition: 2), deleted = FleetRevisions(value: -4, definition: 3)
        XCTAssertEqual(FleetRewind.highestRevision(cursor: 5, revisions: [own, deleted]), 6)
        XCTAssertEqual(FleetRewind.highestRevision(cursor: 5, revisions: [FleetRevisions(value: -7, definition: 2)]), 7, "a deletion's revision counts")
        XCTAssertEqual(FleetRewind.highestRevision(cursor: 9, revisions: [own]), 9)
        XCTAssertEqual(FleetRewind.check(ResponseHeader(revision: 5, clusterID: 0xabc), cursor: 6, clusterID: 0xabc),
                       .revisionBelowMirror(etcd: 5, mirror: 6))
    }

    /// etcd's counts of definitions and values differ from the mirror's with nothing after the
    /// cursor to explain them, still after the watch was started again at that cursor: the
    /// mirror is read again in full, etcd the source of truth; once per cursor, so a foreign key
    /// under the prefix cannot make it loop.
    func testCountsThatStillDifferAfterTheWatchWasStartedAgainAtTheCursorAreARewind() {
        let etcd = (definitions: Int64(2), values: Int64(0)), mirror = (definitions: 2, values: 1)
        XCTAssertEqual(FleetRewind.check(counts: etcd, mirrored: mirror, at: 5, watchRestartedAtCursor: true, readAgainAtCursor: false),
                       .mirrorDisagrees(revision: 5, definitions: 2, values: 0, mirrorDefinitions: 2, mirrorValues: 1))
        XCTAssertNil(FleetRewind.check(counts: etcd, mirrored: mirror, at: 5, watchRestartedAtCursor: false, readAgainAtCursor: false),
                     "the watch is started again first")
        XCTAssertNil(FleetRewind.check(counts: etcd, mirrored: mirror, at: 5, watchRestartedAtCursor: true, readAgainAtCursor: true),
                     "once per cursor")
        XCTAssertNil(FleetRewind.check(counts: etcd, mirrored: (definitions: 2, values: 0), at: 5, watchRestartedAtCursor: true,
                                       readAgainAtCursor: false), "the same counts")
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
