import Foundation
import XCTest
@testable import Etcd
import EtcdTestSupport

/// Txns started on one thread without waiting and finished on another (``TxnLane``): the
/// fleet's write path sends them from the D-Bus queue this way.
final class EtcdTxnLaneTests: XCTestCase {
    private var cluster: EtcdCluster?

    override func tearDown() {
        cluster?.stop()
        cluster = nil
    }

    func testAStartedTxnReachesEtcdBeforeFinishAndFinishAnswersAsTxnDoes() throws {
        let cluster = try EtcdCluster()
        self.cluster = cluster
        let client = try EtcdClient(endpoints: cluster.endpoints)
        let reader = try EtcdClient(endpoints: cluster.endpoints)
        let key = Array("lane/k".utf8)
        let lane = try client.makeTxnLane()
        // The first txn opens the lane's connection; the second shows the request leaving on a
        // connection already open, with nobody waiting for it.
        XCTAssertTrue(lane.start(compares: [.modRevision(of: key, is: 0)], success: [.put(key, [1])], failure: [.get(key)],
                                 resendIfConnectionLost: true, timeout: nil))
        let created = try lane.finish()
        XCTAssertTrue(created.succeeded)
        XCTAssertTrue(lane.start(compares: [.modRevision(of: key, is: created.header.revision)], success: [.put(key, [2])],
                                 failure: [.get(key)], resendIfConnectionLost: true, timeout: nil))
        var seen: KeyValue?
        for _ in 0..<300 where seen?.value != [2] {
            seen = try reader.range(key: key).kvs.first
            if seen?.value != [2] { usleep(10_000) }
        }
        XCTAssertEqual(seen?.value, [2], "the txn was applied before anyone called finish")
        let second = try lane.finish()
        XCTAssertTrue(second.succeeded)
        XCTAssertEqual(second.header.revision, seen?.modRevision)

        // A lost compare answers with the failure branch, as txn does.
        XCTAssertTrue(lane.start(compares: [.modRevision(of: key, is: created.header.revision)], success: [.put(key, [3])],
                                 failure: [.get(key)], resendIfConnectionLost: true, timeout: nil))
        let lost = try lane.finish()
        XCTAssertFalse(lost.succeeded)
        guard case let .range(current) = lost.responses.first else { return XCTFail("expected the failure branch's read: \(lost)") }
        XCTAssertEqual(current.kvs.first?.value, [2])
    }

    func testAStartedTxnMovesOnFromADeadEndpointAndEtcdsRefusalIsTheSameError() throws {
        let cluster = try EtcdCluster()
        self.cluster = cluster
        let dead = try FreePorts.take(1)[0]
        let client = try EtcdClient(endpoints: ["127.0.0.1:\(dead)"] + cluster.endpoints)
        let lane = try client.makeTxnLane()
        let key = Array("lane/failover".utf8)
        XCTAssertTrue(lane.start(compares: [.modRevision(of: key, is: 0)], success: [.put(key, [1])], failure: [],
                                 resendIfConnectionLost: false, timeout: nil))
        XCTAssertTrue(try lane.finish().succeeded)
        XCTAssertEqual(client.preferredEndpoint, 1, "the live endpoint is remembered, as after txn")

        // More operations than etcd takes: the server's refusal, as txn reports it.
        let many = (0..<129).map { RequestOp.put(Array("lane/many/\($0)".utf8), [1]) }
        var direct: EtcdError?
        do { _ = try client.txn(compares: [], success: many) } catch { direct = error }
        XCTAssertTrue(lane.start(compares: [], success: many, failure: [], resendIfConnectionLost: false, timeout: nil))
        var started: EtcdError?
        do { _ = try lane.finish() } catch { started = error }
        XCTAssertNotNil(direct)
        XCTAssertEqual(started?.code, direct?.code)
        XCTAssertEqual(started?.message, direct?.message)
    }

    func testAStartedTxnToAMemberThatNeverAnswersEndsWithinItsTimeout() throws {
        let silent = try FreePorts.silentListener()
        defer { close(silent.fd) }
        let client = try EtcdClient(endpoints: ["127.0.0.1:\(silent.port)"])
        let lane = try client.makeTxnLane()
        XCTAssertTrue(lane.start(compares: [], success: [.put([1], [1])], failure: [], resendIfConnectionLost: true,
                                 timeout: .milliseconds(300)))
        XCTAssertThrowsError(try lane.finish()) { error in
            XCTAssertEqual((error as! EtcdError).code, .timedOut)
            XCTAssertTrue((error as! EtcdError).message.contains("127.0.0.1:\(silent.port)"), "\(error)")
        }
    }
}
