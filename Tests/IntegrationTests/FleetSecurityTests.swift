import DBus
import Etcd
import EtcdTestSupport
import Foundation
import XCTest

/// The fleet over https (`--fleet-ca`) with a throwaway CA: etcd serves nothing else, so a
/// daemon that ignored the CA or spoke http would never connect.
final class FleetTLSTests: FleetTestCase {
    override var ownsEtcd: Bool { true }
    override var etcdTLS: Bool { true }

    func testHostsShareFleetKeysOverHTTPSWithTheirCA() async throws {
        XCTAssertTrue(endpoints.allSatisfy { $0.hasPrefix("https://") }, "\(endpoints)")
        try await hostA.createFleet("lab.tls.motto", "s", default: .string("secret"))
        try await hostA.client.set("lab.tls.motto", .string("encrypted"))
        let arrived = await hostB.waitFor("lab.tls.motto", .string("encrypted"))
        XCTAssertTrue(arrived, diagnostics)
    }
}

/// etcd's own auth protects the prefix; the daemons sign in with `--fleet-credentials`
/// (`USER:PASSWORD` in a file only its owner reads).
final class FleetAuthTests: FleetTestCase {
    override var ownsEtcd: Bool { true }
    override var startsDaemons: Bool { false }

    func testHostsWithCredentialsShareFleetKeysUnderEtcdAuth() async throws {
        // The operator's guide's steps: a root user, a propbus user with a role on the prefix.
        let endpoint = ["--endpoints", endpoints[0]]
        try EtcdCluster.etcdctl(endpoint + ["user", "add", "root:rootpw"])
        try EtcdCluster.etcdctl(endpoint + ["user", "add", "propbus:fleetpw"])
        try EtcdCluster.etcdctl(endpoint + ["role", "add", "propbus"])
        try EtcdCluster.etcdctl(endpoint + ["role", "grant-permission", "propbus", "readwrite", "--prefix=true", "/\(prefix)/"])
        try EtcdCluster.etcdctl(endpoint + ["user", "grant-role", "propbus", "propbus"])
        try EtcdCluster.etcdctl(endpoint + ["auth", "enable"])
        // Auth is really on: an anonymous read is refused.
        XCTAssertThrowsError(try etcd.range(key: Array("/\(prefix)/".utf8), prefix: true), "etcd answered without credentials")

        let credentials = cluster!.directory.appendingPathComponent("fleet-credentials")
        try "propbus:fleetpw\n".write(to: credentials, atomically: true, encoding: .utf8)
        chmod(credentials.path, 0o600)
        hostA.standingArguments = ["--fleet-credentials", credentials.path]
        hostB.standingArguments = ["--fleet-credentials", credentials.path]
        try await startHosts()

        try await hostA.createFleet("lab.auth.note", "s", default: .string(""))
        try await hostA.client.set("lab.auth.note", .string("signed in"))
        let arrived = await hostB.waitFor("lab.auth.note", .string("signed in"))
        XCTAssertTrue(arrived, "\(hostA.stderr.suffix(2000))\n\(hostB.stderr.suffix(2000))")

        // What the daemons wrote is etcd's, readable with the same user.
        var options = EtcdOptions()
        options.credentials = .init(user: "propbus", password: "fleetpw")
        let signedIn = try EtcdClient(endpoints: endpoints, options: options)
        let entry = try Fleet.etcdEntry(signedIn, prefix: prefix, key: "lab.auth.note")
        XCTAssertNotNil(entry, "no lab.auth.note under /\(prefix)/ for the propbus user")
    }
}

/// Members that require client certificates (`--client-cert-auth`): the hosts present theirs
/// with `--fleet-cert` and `--fleet-key`.
final class FleetClientCertificateTests: FleetTestCase {
    override var ownsEtcd: Bool { true }
    override var etcdTLS: Bool { true }
    override var etcdClientCertificates: Bool { true }

    func testHostsWithAClientCertificateShareFleetKeys() async throws {
        try await hostA.createFleet("lab.mtls.motto", "s", default: .string("hello"))
        try await hostA.client.set("lab.mtls.motto", .string("mutual"))
        let arrived = await hostB.waitFor("lab.mtls.motto", .string("mutual"))
        XCTAssertTrue(arrived, diagnostics)
    }
}
