import Foundation
import XCTest
@testable import Etcd
import EtcdTestSupport

/// Several endpoints, dead members and unreachable clusters.
final class EtcdFailoverTests: XCTestCase {
    private var cluster: EtcdCluster?

    override func tearDown() {
        cluster?.stop()
        cluster = nil
    }

    func testCallsFailOverFromADeadEndpointToALiveOne() throws {
        let cluster = try EtcdCluster()
        self.cluster = cluster
        let dead = try FreePorts.take(1)[0]
        let client = try EtcdClient(endpoints: ["127.0.0.1:\(dead)"] + cluster.endpoints)
        let put = try client.put(key: Array("k".utf8), value: [1])
        XCTAssertEqual(try client.range(key: Array("k".utf8)).kvs.first?.modRevision, put.header.revision)
        let txn = try client.txn(compares: [.modRevision(of: Array("k".utf8), is: put.header.revision)], success: [.delete(Array("k".utf8))])
        XCTAssertTrue(txn.succeeded)
        // The live endpoint is remembered: later calls go there first.
        XCTAssertEqual(client.preferredEndpoint, 1)

        let log = UpdateLog()
        let fresh = try EtcdClient(endpoints: ["127.0.0.1:\(dead)"] + cluster.endpoints)
        let stream = fresh.watch(prefix: Array("k".utf8), onUpdate: log.append)
        defer { stream.cancel() }
        try log.waitUntilCreated()
        XCTAssertTrue(log.all.contains(.created(endpoint: cluster.endpoints[0], revision: txn.header.revision)), "\(log.all)")
        try client.put(key: Array("k".utf8), value: [2])
        try log.wait("the event through the second endpoint") { _ in log.events.count == 1 }
    }

    func testWritesToAnUnreachableClusterFailFastWithATypedErrorNamingTheEndpoints() throws {
        let refused = try FreePorts.take(2)
        let silent = try FreePorts.silentListener()
        defer { close(silent.fd) }
        let endpoints = ["127.0.0.1:\(refused[0])", "127.0.0.1:\(silent.port)", "127.0.0.1:\(refused[1])"]
        let client = try EtcdClient(endpoints: endpoints)

        // Refused everywhere: no need to wait for the deadline.
        let refusedOnly = try EtcdClient(endpoints: ["127.0.0.1:\(refused[0])", "127.0.0.1:\(refused[1])"])
        var started = ContinuousClock.now
        XCTAssertThrowsError(try refusedOnly.put(key: [1], value: [1])) { error in
            let error = error as! EtcdError
            XCTAssertEqual(error.code, .unavailable)
            XCTAssertEqual(error.endpoints, refusedOnly.endpoints)
            XCTAssertTrue(error.message.contains("127.0.0.1:\(refused[1])"), error.message)
        }
        XCTAssertLessThan(ContinuousClock.now - started, .seconds(1))

        // A member that takes the request and never answers: a write's fate is unknown, so it
        // is not resent elsewhere; the call still ends within the 3 s deadline.
        started = ContinuousClock.now
        XCTAssertThrowsError(try client.txn(compares: [], success: [.put([1], [1])])) { error in
            let error = error as! EtcdError
            XCTAssertEqual(error.code, .timedOut)
            XCTAssertTrue(error.message.contains("127.0.0.1:\(silent.port)"), error.message)
        }
        XCTAssertLessThan(ContinuousClock.now - started, .milliseconds(3500))

        // A read moves on past the silent member, and fails within its deadline too.
        var short = EtcdOptions()
        short.requestTimeout = .seconds(1)
        let reader = try EtcdClient(endpoints: endpoints, options: short)
        started = ContinuousClock.now
        XCTAssertThrowsError(try reader.range(key: [1])) { error in
            XCTAssertEqual((error as! EtcdError).code, .timedOut)
            XCTAssertTrue((error as! EtcdError).message.contains("127.0.0.1:\(refused[1])"), "every endpoint was tried: \(error)")
        }
        XCTAssertLessThan(ContinuousClock.now - started, .milliseconds(1500))
    }

    func testWatchOnAnUnreachableClusterReportsInterruptionsUntilCancelled() throws {
        let refused = try FreePorts.take(1)
        var options = EtcdOptions()
        options.watchRetryDelay = .milliseconds(20)
        let client = try EtcdClient(endpoints: ["127.0.0.1:\(refused[0])"], options: options)
        let log = UpdateLog()
        let stream = client.watch(prefix: [1], onUpdate: log.append)
        try log.wait("two interruptions") { $0.filter { if case .interrupted = $0 { return true } else { return false } }.count >= 2 }
        let started = ContinuousClock.now
        stream.cancel()
        XCTAssertLessThan(ContinuousClock.now - started, .milliseconds(500), "cancel must wake the stream's thread")
        guard case let .interrupted(error) = log.all.first else { return XCTFail("\(log.all)") }
        XCTAssertEqual(error.code, .unavailable)
    }

    func testAuthenticatedClientGetsATokenRenewsItAndAnUnauthenticatedOneIsRefused() throws {
        // Simple tokens expire after --auth-token-ttl seconds without use.
        let cluster = try EtcdCluster(extraArguments: ["--auth-token-ttl", "1"])
        self.cluster = cluster
        let endpoint = cluster.endpoints[0]
        try EtcdCluster.etcdctl(["--endpoints", endpoint, "user", "add", "root:rootpw"])
        try EtcdCluster.etcdctl(["--endpoints", endpoint, "auth", "enable"])

        var options = EtcdOptions()
        options.credentials = .init(user: "root", password: "rootpw")
        let client = try EtcdClient(endpoints: cluster.endpoints, options: options)
        let put = try client.put(key: Array("secret".utf8), value: [1])
        XCTAssertEqual(try client.range(key: Array("secret".utf8)).kvs.first?.modRevision, put.header.revision)

        let log = UpdateLog()
        let stream = client.watch(prefix: Array("secret".utf8), onUpdate: log.append)
        defer { stream.cancel() }
        try log.waitUntilCreated()
        try client.put(key: Array("secret".utf8), value: [2])
        try log.wait("the event on an authenticated watch") { _ in log.events.count == 1 }

        // Let the token expire (etcd checks simple tokens' TTL about once a second): the next
        // call is refused with "invalid auth token", and the client authenticates again.
        usleep(2_500_000)
        let renewed = try client.put(key: Array("secret".utf8), value: [3])
        XCTAssertEqual(try client.range(key: Array("secret".utf8)).kvs.first?.modRevision, renewed.header.revision)

        let anonymous = try EtcdClient(endpoints: cluster.endpoints)
        XCTAssertThrowsError(try anonymous.range(key: Array("secret".utf8))) { error in
            XCTAssertEqual((error as! EtcdError).code, .authentication, "\(error)")
        }
        options.credentials = .init(user: "root", password: "wrong")
        XCTAssertThrowsError(try EtcdClient(endpoints: cluster.endpoints, options: options).range(key: [1])) { error in
            XCTAssertEqual((error as! EtcdError).code, .authentication, "\(error)")
        }
    }

    func testHTTPSEndpointIsTrustedThroughTheCAFileAndRefusedWithoutIt() throws {
        let certificates = FileManager.default.temporaryDirectory.appendingPathComponent("propbus-etcd-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: certificates, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: certificates) }
        let tls = try EtcdCluster.makeCertificates(in: certificates)
        let cluster = try EtcdCluster(tls: tls)
        self.cluster = cluster
        XCTAssertTrue(cluster.endpoints[0].hasPrefix("https://"))

        var options = EtcdOptions()
        options.caFile = tls.caFile
        let client = try EtcdClient(endpoints: cluster.endpoints, options: options)
        let put = try client.put(key: Array("tls".utf8), value: [1])
        XCTAssertEqual(try client.range(key: Array("tls".utf8)).kvs.first?.modRevision, put.header.revision)
        let log = UpdateLog()
        let stream = client.watch(prefix: Array("tls".utf8), fromRevision: put.header.revision, onUpdate: log.append)
        defer { stream.cancel() }
        try log.wait("the event over TLS") { _ in log.events.count == 1 }

        // Without the CA the server is not trusted: the request never leaves, even a write is
        // "unavailable" (safe to send elsewhere), and the message says why.
        XCTAssertThrowsError(try EtcdClient(endpoints: cluster.endpoints).put(key: Array("tls".utf8), value: [2])) { error in
            let error = error as! EtcdError
            XCTAssertEqual(error.code, .unavailable)
            XCTAssertTrue(error.message.lowercased().contains("certificate"), error.message)
        }
    }

    func testThreeMemberClusterKeepsServingWhenTheLeaderIsKilled() throws {
        let cluster = try EtcdCluster(size: 3)
        self.cluster = cluster
        guard let leader = try cluster.leaderIndex() else { return XCTFail("no leader\n\(cluster.logs())") }
        // The client prefers the leader, so killing it forces a failover.
        let ordered = [cluster.endpoints[leader]] + cluster.endpoints.enumerated().filter { $0.offset != leader }.map(\.element)
        var options = EtcdOptions()
        options.watchRetryDelay = .milliseconds(50)
        // A write a follower forwarded to the dead leader times out: keep each try short.
        options.requestTimeout = .seconds(1)
        let client = try EtcdClient(endpoints: ordered, options: options)
        let before = try client.put(key: Array("fleet/a".utf8), value: [1])
        let log = UpdateLog()
        let stream = client.watch(prefix: Array("fleet/".utf8), fromRevision: before.header.revision, onUpdate: log.append)
        defer { stream.cancel() }
        try log.wait("the first event") { _ in log.events.count == 1 }

        cluster.kill(leader)
        // Writes are retried only when etcd said "no leader" before proposing; an election takes
        // about a second here, so a few attempts may fail with a typed error first.
        let written = try writeUntilAccepted(client, key: Array("fleet/b".utf8), value: [2], cluster: cluster)
        XCTAssertEqual(try client.range(key: Array("fleet/b".utf8)).kvs.first?.modRevision, written.header.revision)
        try log.wait(timeout: 15, "the watch resumed on another member") { _ in log.events.count >= 2 }
        XCTAssertEqual(log.events.map(\.kv.value), [[1], [2]])
        XCTAssertNotEqual(client.preferredEndpoint, 0)
    }

    func testWatchOnAMemberThatLostQuorumIsInterruptedInsteadOfGoingSilent() throws {
        let cluster = try EtcdCluster(size: 3)
        self.cluster = cluster
        let survivor = 2
        var options = EtcdOptions()
        options.watchRetryDelay = .milliseconds(100)
        let client = try EtcdClient(endpoints: [cluster.endpoints[survivor]], options: options)
        let log = UpdateLog()
        let stream = client.watch(prefix: Array("fleet/".utf8), onUpdate: log.append)
        defer { stream.cancel() }
        try log.waitUntilCreated()
        cluster.kill(0)
        cluster.kill(1)
        // Grpc-Metadata-hasleader: true makes the member end the stream once it has had no
        // leader for a while; without it the watch would just stay quiet.
        let updates = try log.wait(timeout: 15, "an interruption from the member without quorum") { updates in
            updates.contains { if case .interrupted = $0 { return true } else { return false } }
        }
        guard case let .interrupted(error)? = updates.first(where: { if case .interrupted = $0 { return true } else { return false } }) else {
            return XCTFail("\(updates)")
        }
        XCTAssertEqual(error.code, .unavailable)
        XCTAssertTrue(error.message.contains("no leader"), error.message)
        // Writes fail fast, with a typed error.
        let started = ContinuousClock.now
        XCTAssertThrowsError(try client.put(key: Array("fleet/x".utf8), value: [1]))
        XCTAssertLessThan(ContinuousClock.now - started, .milliseconds(3500))
    }

    /// Puts until etcd accepts (up to 10 s), checking that each refusal is a typed etcd error.
    private func writeUntilAccepted(_ client: EtcdClient, key: [UInt8], value: [UInt8], cluster: EtcdCluster) throws -> PutResponse {
        let deadline = Date().addingTimeInterval(10)
        var failures: [EtcdError] = []
        while Date() < deadline {
            do {
                return try client.put(key: key, value: value)
            } catch {
                failures.append(error)
            }
        }
        throw EtcdClusterError("no write succeeded after the leader was killed: \(failures)\n\(cluster.logs())")
    }
}
