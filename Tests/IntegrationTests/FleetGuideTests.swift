import DBus
import Etcd
import EtcdTestSupport
import Foundation
import XCTest

/// docs/fleet.md's operator's guide, run as written: its certificates, auth, backup and restore
/// steps (each `sh` block after an `<!-- FleetGuideTests: NAME -->` line, run by bash with
/// `set -eu` in one directory) against an etcd member on loopback that serves the guide's
/// certificates, with two hosts using the guide's options.
final class FleetGuideTests: XCTestCase {
    private static let guide = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("docs/fleet.md")

    private var directory: URL!
    private var cluster: EtcdCluster?
    private var hosts: [FleetHost] = []

    override func tearDown() async throws {
        for host in hosts { await host.tearDown() }
        cluster?.stop()
        if let directory { try? FileManager.default.removeItem(at: directory) }
        try await super.tearDown()
    }

    /// The `sh` block the guide marks `name`.
    private static func block(_ name: String) throws -> String {
        let lines = try String(contentsOf: guide, encoding: .utf8).components(separatedBy: "\n")
        guard let marker = lines.firstIndex(of: "<!-- FleetGuideTests: \(name) -->"),
              let start = lines[marker...].firstIndex(where: { $0.hasPrefix("```sh") }),
              let end = lines[(start + 1)...].firstIndex(where: { $0.hasPrefix("```") }) else {
            throw TestSetupError("docs/fleet.md has no sh block marked FleetGuideTests: \(name)")
        }
        return lines[(start + 1)..<end].joined(separator: "\n")
    }

    /// Runs the guide's block `name` with bash in the test's directory, with `variables` set.
    private func run(_ name: String, _ variables: [String: String]) throws {
        let script = try Self.block(name)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = ["-c", "set -eu\n" + script]
        process.currentDirectoryURL = directory
        process.environment = ProcessInfo.processInfo.environment.merging(variables) { $1 }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw TestSetupError("the guide's \(name) step failed (exit \(process.terminationStatus)):\n\(script)\n---\n\(text.suffix(3000))")
        }
    }

    /// Waits until a linearizable read with the guide's credentials succeeds.
    private func waitUntilServing(_ client: EtcdClient) async -> Bool {
        await eventually(timeout: 20) { (try? client.range(key: Array("/propbus/".utf8), prefix: true)) != nil }
    }

    func testTheOperatorsGuideRunsAsWritten() async throws {
        guard EtcdCluster.etcdPath != nil else { throw XCTSkip("etcd is not installed") }
        directory = try makeTemporaryDirectory(prefix: "pbit-guide")
        let path = { (name: String) in self.directory.appendingPathComponent(name).path }
        try run("certificates", ["MEMBER_IP": "127.0.0.1", "HOST": "fleet-host-a"])
        let tls = EtcdCluster.TLSFiles(caFile: path("ca.pem"), certFile: path("member.pem"), keyFile: path("member.key"),
                                       clientCertFile: path("host.pem"), clientKeyFile: path("host.key"))
        let cluster = try EtcdCluster(size: 1, tls: tls)
        self.cluster = cluster
        let member = cluster.members[0]
        var variables = ["ETCD": member.clientURL, "ROOT_PASSWORD": "guide-root-pw", "PROPBUS_PASSWORD": "guide-fleet-pw",
                         "CREDENTIALS": path("etcd-credentials")]
        try run("auth", variables)

        var options = EtcdOptions()
        options.caFile = tls.caFile
        options.credentials = .init(user: "propbus", password: "guide-fleet-pw")
        let etcd = try EtcdClient(endpoints: cluster.endpoints, options: options)
        for name in ["fleet-host-a", "fleet-host-b"] {
            let host = try await FleetHost.make(name: name, endpoints: cluster.endpoints, prefix: "propbus")
            host.standingArguments = ["--fleet-ca", tls.caFile, "--fleet-credentials", path("etcd-credentials")]
            hosts.append(host)
            try await host.start()
        }
        let (hostA, hostB) = (hosts[0], hosts[1])
        let key = "lab.guide.motto"
        try await hostA.createFleet(key, "s", default: .string("none"))
        try await hostA.client.set(key, .string("backed-up"))
        let arrived = await hostB.waitFor(key, .string("backed-up"))
        XCTAssertTrue(arrived, "the hosts set up by the guide do not share fleet keys\n\(hostB.stderr.suffix(2000))")

        try run("backup", variables)
        try await hostA.client.set(key, .string("after-backup"))
        let later = await hostB.waitFor(key, .string("after-backup"))
        XCTAssertTrue(later, hostB.stderr.suffix(2000).description)

        cluster.kill(0)
        variables["MEMBER_NAME"] = member.name
        variables["RESTORED_DIR"] = path("restored")
        variables["INITIAL_CLUSTER"] = cluster.initialCluster
        variables["NEW_TOKEN"] = "propbus-restored-\(UUID().uuidString.prefix(8))"
        variables["PEER_URL"] = member.peerURL
        try run("restore", variables)
        try FileManager.default.removeItem(at: member.dataDir)
        try FileManager.default.moveItem(atPath: path("restored"), toPath: member.dataDir.path)
        try cluster.launch(0)
        let serving = await waitUntilServing(etcd)
        XCTAssertTrue(serving, "the restored member does not serve the guide's user\n\(cluster.logs())")

        let restoredA = await hostA.waitFor(key, .string("backed-up"), timeout: 20)
        let restoredB = await hostB.waitFor(key, .string("backed-up"), timeout: 20)
        XCTAssertTrue(restoredA && restoredB, "the hosts did not follow the restored etcd\nA:\n\(hostA.stderr.suffix(2000))\nB:\n\(hostB.stderr.suffix(2000))")
        let connected = await hostA.waitForFleetState("connected", timeout: 20)
        XCTAssertTrue(connected, hostA.stderr.suffix(2000).description)
        try await hostA.client.set(key, .string("after-restore"))
        let written = await hostB.waitFor(key, .string("after-restore"))
        XCTAssertTrue(written, "a Set after the restore never reached B\n\(hostB.stderr.suffix(2000))")
    }
}
