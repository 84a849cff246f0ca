import Foundation
import Synchronization
import XCTest
@testable import Etcd
import EtcdTestSupport

/// Reads, writes and transactions against a real single-member etcd.
final class EtcdKVTests: XCTestCase {
    private var cluster: EtcdCluster!
    private var client: EtcdClient!

    override func setUpWithError() throws {
        cluster = try EtcdCluster()
        client = try EtcdClient(endpoints: cluster.endpoints)
    }

    override func tearDown() {
        cluster?.stop()
        cluster = nil
        client = nil
    }

    func testPutThenRangeRoundTripsBinaryKeysAndValues() throws {
        let key: [UInt8] = [0x00, 0xFF, 0x0A, 0x22, 0x5C, 0x80, 0x2F]
        let value: [UInt8] = Array(0...255) + [0, 0]
        let put = try client.put(key: key, value: value)
        XCTAssertGreaterThan(put.header.revision, 1)

        let read = try client.range(key: key)
        XCTAssertEqual(read.count, 1)
        XCTAssertEqual(read.kvs.first?.key, key)
        XCTAssertEqual(read.kvs.first?.value, value)
        XCTAssertEqual(read.kvs.first?.modRevision, put.header.revision)
        XCTAssertEqual(read.kvs.first?.createRevision, put.header.revision)
        XCTAssertEqual(read.kvs.first?.version, 1)
        XCTAssertEqual(read.header.revision, put.header.revision)

        // An empty value is left out of proto3 JSON: it must still read back as empty.
        try client.put(key: Array("empty".utf8), value: [])
        XCTAssertEqual(try client.range(key: Array("empty".utf8)).kvs.first?.value, [])
    }

    func testRangeOfAbsentKeyIsEmptyWithCountZero() throws {
        let read = try client.range(key: Array("nothing here".utf8))
        XCTAssertEqual(read.kvs, [])
        XCTAssertEqual(read.count, 0)
        XCTAssertGreaterThan(read.header.revision, 0)
    }

    func testPrefixRangeReturnsOnlyThePrefixInKeyOrderAndOldRevisionsStayReadable() throws {
        try client.put(key: Array("fleet/b".utf8), value: Array("2".utf8))
        let first = try client.put(key: Array("fleet/a".utf8), value: Array("1".utf8))
        try client.put(key: Array("fleeu".utf8), value: Array("outside".utf8))
        try client.put(key: Array("fleet/a".utf8), value: Array("changed".utf8))

        let now = try client.range(key: Array("fleet/".utf8), prefix: true)
        XCTAssertEqual(now.kvs.map { String(decoding: $0.key, as: UTF8.self) }, ["fleet/a", "fleet/b"])
        XCTAssertEqual(now.kvs.first?.value, Array("changed".utf8))
        XCTAssertEqual(now.kvs.first?.version, 2)

        let then = try client.range(key: Array("fleet/".utf8), prefix: true, revision: first.header.revision)
        XCTAssertEqual(then.kvs.first?.value, Array("1".utf8))
    }

    func testMinModRevisionLeavesOutKeysChangedBeforeItAndLimitCountsWhatIsLeft() throws {
        let prefix = Array("/mm/".utf8)
        _ = try client.put(key: prefix + Array("a".utf8), value: [1])
        let middle = try client.put(key: prefix + Array("b".utf8), value: [2]).header.revision
        _ = try client.put(key: prefix + Array("c".utf8), value: [3])
        var request = RangeRequest(key: prefix, prefix: true)
        request.minModRevision = middle
        XCTAssertEqual(try client.range(request).kvs.map(\.value), [[2], [3]])
        // The fleet's watch check: is anything newer than the cursor? One key is enough.
        request.limit = 1
        XCTAssertEqual(try client.range(request).kvs.count, 1)
        request.minModRevision = try client.range(key: prefix, prefix: true).header.revision + 1
        XCTAssertEqual(try client.range(request).kvs.count, 0)
    }

    func testDeleteRemovesAKeyAndReportsHowMany() throws {
        try client.put(key: Array("gone/1".utf8), value: [1])
        try client.put(key: Array("gone/2".utf8), value: [2])
        let deleted = try client.delete(key: Array("gone/".utf8), prefix: true)
        XCTAssertEqual(deleted.deleted, 2)
        XCTAssertEqual(try client.range(key: Array("gone/".utf8), prefix: true).count, 0)
        // Nothing to delete: proto3 leaves out "deleted", which must read as 0.
        XCTAssertEqual(try client.delete(key: Array("gone/1".utf8)).deleted, 0)
    }

    func testTxnWithMatchingModRevisionSucceedsAndWritesAtOneRevision() throws {
        let a = Array("txn/a".utf8), b = Array("txn/b".utf8)
        let created = try client.put(key: a, value: Array("1".utf8))
        let txn = try client.txn(
            compares: [.modRevision(of: a, is: created.header.revision), .modRevision(of: b, is: 0)],
            success: [.put(a, Array("2".utf8)), .put(b, Array("new".utf8)), .get(a)],
            failure: [.get(a)])
        XCTAssertTrue(txn.succeeded)
        XCTAssertEqual(txn.header.revision, created.header.revision + 1)
        XCTAssertEqual(txn.responses.count, 3)
        guard case let .range(read) = txn.responses[2] else { return XCTFail("expected a range response: \(txn.responses)") }
        XCTAssertEqual(read.kvs.first?.value, Array("2".utf8))
        let both = try client.range(key: Array("txn/".utf8), prefix: true)
        XCTAssertEqual(both.kvs.map(\.modRevision), [txn.header.revision, txn.header.revision])
    }

    func testTxnWithStaleModRevisionFailsAndRunsTheFailureBranch() throws {
        let key = Array("txn/stale".utf8)
        let first = try client.put(key: key, value: Array("1".utf8))
        try client.put(key: key, value: Array("2".utf8))
        let txn = try client.txn(compares: [.modRevision(of: key, is: first.header.revision)],
                                 success: [.put(key, Array("lost update".utf8))],
                                 failure: [.get(key)])
        // etcd leaves "succeeded" out of a failed txn's JSON.
        XCTAssertFalse(txn.succeeded)
        guard case let .range(current) = txn.responses.first else { return XCTFail("expected the failure branch's read") }
        XCTAssertEqual(current.kvs.first?.value, Array("2".utf8))
        XCTAssertEqual(try client.range(key: key).kvs.first?.value, Array("2".utf8))
    }

    func testTxnComparesOnVersionAndValue() throws {
        let key = Array("txn/cas".utf8)
        let absent = try client.txn(compares: [Compare(key, .equal, .version(0))], success: [.put(key, Array("v1".utf8))])
        XCTAssertTrue(absent.succeeded)
        let wrongValue = try client.txn(compares: [Compare(key, .equal, .value(Array("other".utf8)))], success: [.delete(key)])
        XCTAssertFalse(wrongValue.succeeded)
        let rightValue = try client.txn(compares: [Compare(key, .equal, .value(Array("v1".utf8)))], success: [.delete(key)])
        XCTAssertTrue(rightValue.succeeded)
        guard case let .deleteRange(deleted) = rightValue.responses.first else { return XCTFail("expected a delete response") }
        XCTAssertEqual(deleted.deleted, 1)
    }

    func testTxnAboveEtcdsOperationLimitIsRefusedByTheServer() throws {
        let ops = (0..<129).map { RequestOp.put(Array("many/\($0)".utf8), [1]) }
        XCTAssertThrowsError(try client.txn(compares: [], success: ops)) { error in
            let error = error as! EtcdError
            XCTAssertEqual(error.code, .server)
            XCTAssertEqual(error.grpcCode, 3)
            XCTAssertTrue(error.message.contains("too many operations"), error.message)
        }
    }

    func testLargeValuesTravelAndEtcdsRequestLimitIsATypedServerError() throws {
        // Bodies above 1 KiB would make libcurl wait for "100 Continue" unless the client turns
        // Expect off; a megabyte must still round-trip well within the deadline.
        let large = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        try client.put(key: Array("large".utf8), value: large)
        XCTAssertEqual(try client.range(key: Array("large".utf8)).kvs.first?.value, large)
        XCTAssertThrowsError(try client.put(key: Array("huge".utf8), value: large + large.prefix(600 << 10))) { error in
            let error = error as! EtcdError
            XCTAssertEqual(error.code, .server)
            XCTAssertTrue(error.message.contains("request is too large"), error.message)
        }
    }

    func testConcurrentCallersEachGetTheirOwnAnswer() throws {
        let client = self.client!
        let failures = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { worker in
            for round in 0..<25 {
                let key = Array("concurrent/\(worker)".utf8)
                let value = Array("\(worker).\(round)".utf8)
                do {
                    let put = try client.put(key: key, value: value)
                    let read = try client.range(key: key)
                    if read.kvs.first?.value != value || read.kvs.first?.modRevision != put.header.revision {
                        failures.withLock { $0.append("worker \(worker) round \(round) read \(read.kvs)") }
                    }
                } catch {
                    failures.withLock { $0.append("worker \(worker) round \(round): \(error)") }
                }
            }
        }
        XCTAssertEqual(failures.withLock { $0 }, [])
        XCTAssertEqual(try client.range(key: Array("concurrent/".utf8), prefix: true).count, 8)
    }

    func testLeaseExpiryRemovesItsKeyAndKeepAliveRenewsIt() throws {
        let lease = try client.grantLease(ttl: 2)
        XCTAssertEqual(lease.ttl, 2)
        let key = Array("hosts/a".utf8)
        try client.put(key: key, value: Array("up".utf8), lease: lease.id)
        XCTAssertEqual(try client.range(key: key).kvs.first?.lease, lease.id)
        XCTAssertEqual(try client.keepAlive(lease: lease.id), 2)

        // Without renewals the key goes when the lease does (etcd checks expiry about every 500 ms).
        let deadline = Date().addingTimeInterval(8)
        while try client.range(key: key).count > 0 {
            XCTAssertLessThan(Date(), deadline, "the leased key outlived its lease")
            if Date() > deadline { return }
            usleep(100_000)
        }
        XCTAssertThrowsError(try client.keepAlive(lease: lease.id)) { error in
            XCTAssertEqual((error as! EtcdError).code, .leaseNotFound)
        }
    }

    func testRevokeDeletesTheKeysOfALease() throws {
        let lease = try client.grantLease(ttl: 60)
        try client.put(key: Array("hosts/b".utf8), value: [1], lease: lease.id)
        try client.revoke(lease: lease.id)
        XCTAssertEqual(try client.range(key: Array("hosts/b".utf8)).count, 0)
        XCTAssertThrowsError(try client.revoke(lease: lease.id)) { error in
            XCTAssertEqual((error as! EtcdError).code, .leaseNotFound)
        }
    }
}
