import DBus
import Etcd
import EtcdTestSupport
import Foundation
import XCTest

/// A test case with an etcd and two hosts, A and B, on their own buses, both with
/// `--fleet etcd://…/<a prefix of the test's own>`, and the fleet marker key created.
///
/// Tests that stop, kill or compact etcd set ``ownsEtcd`` (and ``etcdSize`` for a cluster):
/// they get an etcd of their own, reachable as ``cluster``.
class FleetTestCase: XCTestCase {
    /// Whether each test gets an etcd of its own (because it stops, kills or compacts it).
    var ownsEtcd: Bool { false }
    /// Members of an own etcd.
    var etcdSize: Int { 1 }
    /// Whether an own etcd serves clients over https only (a throwaway CA; the hosts get
    /// `--fleet-ca`).
    var etcdTLS: Bool { false }
    /// Whether an own TLS etcd also requires client certificates (`--client-cert-auth`; the
    /// hosts get `--fleet-cert` and `--fleet-key`).
    var etcdClientCertificates: Bool { false }
    /// Whether setUp starts A's and B's daemons (else the test calls ``startHosts()``).
    var startsDaemons: Bool { true }
    /// The hosts' buses: `.system` (with the project's policy, reachable by `nobody`) for
    /// access-control tests.
    var busKind: PrivateBus.Kind { .session }

    /// The test's own etcd, when ``ownsEtcd``.
    var cluster: EtcdCluster?
    var endpoints: [String] = []
    var prefix = ""
    /// A plain etcd client, to look at what the daemons wrote.
    var etcd: EtcdClient!
    var hostA: FleetHost!
    var hostB: FleetHost!
    private var certificateDirectory: URL?

    override class func tearDown() {
        SharedEtcd.instance.stop()
        super.tearDown()
    }

    override func setUp() async throws {
        try await super.setUp()
        var options = EtcdOptions()
        var hostArguments: [String] = []
        if ownsEtcd {
            var tls: EtcdCluster.TLSFiles?
            if etcdTLS {
                let certificates = try makeTemporaryDirectory(prefix: "pbit-ca")
                certificateDirectory = certificates
                tls = try EtcdCluster.makeCertificates(in: certificates)
                options.caFile = tls?.caFile
                hostArguments = ["--fleet-ca", tls!.caFile]
                if etcdClientCertificates {
                    tls?.requireClientCertificates = true
                    options.certFile = tls?.clientCertFile
                    options.keyFile = tls?.clientKeyFile
                    hostArguments += ["--fleet-cert", tls!.clientCertFile, "--fleet-key", tls!.clientKeyFile]
                }
            }
            let cluster = try EtcdCluster(size: etcdSize, tls: tls)
            self.cluster = cluster
            endpoints = cluster.endpoints
        } else {
            endpoints = try SharedEtcd.instance.endpoints()
        }
        prefix = Fleet.uniquePrefix(name)
        etcd = try EtcdClient(endpoints: endpoints, options: options)
        hostA = try await FleetHost.make(name: "fleet-host-a", endpoints: endpoints, prefix: prefix, busKind: busKind)
        hostB = try await FleetHost.make(name: "fleet-host-b", endpoints: endpoints, prefix: prefix, busKind: busKind)
        hostA.standingArguments = hostArguments
        hostB.standingArguments = hostArguments
        if startsDaemons { try await startHosts() }
    }

    /// Starts A's and B's daemons, connected, and creates the fleet marker key (on A, seen on B).
    func startHosts() async throws {
        try await hostA.start()
        try await hostB.start()
        try await hostA.createFleet(Fleet.markerKey, "i", default: .int32(0))
        guard await eventually(timeout: 10, { (try? await self.hostB.client.get(Fleet.markerKey)) != nil }) else {
            throw TestSetupError("the fleet marker created on A never appeared on B; A:\n\(hostA.stderr.suffix(2000))\nB:\n\(hostB.stderr.suffix(2000))\netcd:\n\(Fleet.dump(etcd, prefix: prefix))")
        }
    }

    override func tearDown() async throws {
        for host in [hostA, hostB].compactMap({ $0 }) {
            if let ended = host.process?.termination, ended.bySignal, ended.status != SIGKILL {
                XCTFail("\(host.name): propbusd \(ended) during the test; stderr:\n\(host.stderr)")
            }
            await host.tearDown()
        }
        hostA = nil
        hostB = nil
        cluster?.stop()
        cluster = nil
        if let certificateDirectory { try? FileManager.default.removeItem(at: certificateDirectory) }
        try await super.tearDown()
    }

    /// Both hosts' stderr and etcd's keys, for a failure message.
    var diagnostics: String {
        "--- A stderr:\n\(hostA.stderr.suffix(3000))\n--- B stderr:\n\(hostB.stderr.suffix(3000))\n--- etcd under \(prefix):\n\(Fleet.dump(etcd, prefix: prefix))"
    }
}

/// A ``FleetTestCase`` whose hosts run on private system buses with `--system-access`, so that
/// a test can call as `nobody` (``setAsNobody(on:_:_:)``); skipped unless run as root.
class FleetSystemAccessTestCase: FleetTestCase {
    override var busKind: PrivateBus.Kind { .system }

    override func setUp() async throws {
        guard getuid() == 0 else { throw XCTSkip("calling as another user (setpriv) needs root") }
        try await super.setUp()
    }

    override func startHosts() async throws {
        hostA.standingArguments.append("--system-access")
        hostB.standingArguments.append("--system-access")
        try await super.startHosts()
    }

    /// `executable` as nobody, with `host`'s bus in its environment.
    func asNobody(on host: FleetHost, _ executable: String, _ arguments: [String]) async throws -> CommandResult {
        var environment = host.bus.environment
        environment["HOME"] = "/nonexistent"
        return try await AsNobody.run(executable, arguments, environment: environment)
    }

    /// `Properties.Set` of `key` as nobody on `host`, through gdbus; `value` is GVariant text.
    func setAsNobody(on host: FleetHost, _ key: String, _ value: String) async throws -> CommandResult {
        let (path, name) = PropBusAPI.locate(key)
        return try await asNobody(on: host, "gdbus", ["call", "--address", host.bus.address, "--dest", PropBusAPI.busName,
                                                      "--object-path", path, "--method", "org.freedesktop.DBus.Properties.Set",
                                                      "--timeout", "10", PropBusAPI.values, name, "<\(value)>"])
    }
}
