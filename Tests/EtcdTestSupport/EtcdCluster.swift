import Foundation
import XCTest
import Etcd

/// Real etcd members on loopback for a test: free ports, a temporary data directory each, fast
/// elections (`--election-timeout 500 --heartbeat-interval 50`), stopped with SIGTERM (then
/// SIGKILL) by ``stop()``.
///
/// Without an `etcd` binary the test is skipped, except in CI (`CI=true`), where that is a
/// failure: scripts/setup installs etcd-server there.
public final class EtcdCluster {
    public struct Member {
        public let name: String
        public let clientURL: String
        public let peerURL: String
        public let dataDir: URL
        public var process: Process?
    }

    /// Certificate files for serving clients over HTTPS.
    public struct TLSFiles {
        public let caFile: String
        public let certFile: String
        public let keyFile: String
        /// A client certificate and key signed by the same CA (for `--client-cert-auth`).
        public let clientCertFile: String
        public let clientKeyFile: String
        /// Whether members require a client certificate (`--client-cert-auth`).
        public var requireClientCertificates = false

        public init(caFile: String, certFile: String, keyFile: String, clientCertFile: String, clientKeyFile: String) {
            self.caFile = caFile
            self.certFile = certFile
            self.keyFile = keyFile
            self.clientCertFile = clientCertFile
            self.clientKeyFile = clientKeyFile
        }
    }

    public private(set) var members: [Member] = []
    private let etcd: String
    private let tls: TLSFiles?
    private let sharedArguments: [String]
    /// `--initial-cluster` and `--initial-cluster-token`, as a restore from a snapshot needs them.
    public let initialCluster: String
    public let token: String
    public let directory: URL
    /// Every member's client URL, in order.
    public var endpoints: [String] { members.map(\.clientURL) }

    public static var etcdPath: String? {
        ["/usr/bin/etcd", "/usr/local/bin/etcd"].first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Starts `size` members forming one cluster and waits until it serves linearizable reads.
    public init(size: Int = 1, tls: TLSFiles? = nil, extraArguments: [String] = []) throws {
        self.tls = tls
        guard let etcd = EtcdCluster.etcdPath else {
            if ProcessInfo.processInfo.environment["CI"] == "true" {
                XCTFail("etcd is not installed, but CI=true: scripts/setup must install etcd-server")
                throw EtcdClusterError("etcd missing in CI")
            }
            throw XCTSkip("etcd is not installed (Debian: etcd-server; scripts/setup installs it)")
        }
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("propbus-etcd-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let ports = try FreePorts.take(2 * size)
        for index in 0..<size {
            members.append(Member(name: "m\(index)", clientURL: "\(tls == nil ? "http" : "https")://127.0.0.1:\(ports[2 * index])",
                                  peerURL: "http://127.0.0.1:\(ports[2 * index + 1])",
                                  dataDir: directory.appendingPathComponent("m\(index)")))
        }
        let initialCluster = members.map { "\($0.name)=\($0.peerURL)" }.joined(separator: ",")
        let token = "propbus-test-\(UUID().uuidString.prefix(8))"
        self.initialCluster = initialCluster
        self.token = token
        self.etcd = etcd
        self.sharedArguments = [
            "--initial-cluster", initialCluster, "--initial-cluster-state", "new", "--initial-cluster-token", token,
            "--election-timeout", "500", "--heartbeat-interval", "50", "--logger", "zap", "--log-level", "warn",
        ] + (tls.map { ["--cert-file", $0.certFile, "--key-file", $0.keyFile] } ?? [])
            + (tls.map { $0.requireClientCertificates ? ["--client-cert-auth", "--trusted-ca-file", $0.caFile] : [] } ?? [])
            + extraArguments
        for index in members.indices { try launch(index) }
        try waitUntilServing()
    }

    /// Starts member `index` (again, after ``kill(_:)``: same data directory and ports).
    public func launch(_ index: Int) throws {
        let member = members[index]
        let process = Process()
        process.executableURL = URL(fileURLWithPath: etcd)
        process.arguments = [
            "--name", member.name, "--data-dir", member.dataDir.path,
            "--listen-client-urls", member.clientURL, "--advertise-client-urls", member.clientURL,
            "--listen-peer-urls", member.peerURL, "--initial-advertise-peer-urls", member.peerURL,
        ] + sharedArguments
        let log = directory.appendingPathComponent("\(member.name).log")
        if !FileManager.default.fileExists(atPath: log.path) {
            _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        }
        let handle = try FileHandle(forWritingTo: log)
        handle.seekToEndOfFile()
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        members[index].process = process
    }

    deinit {
        stop()
    }

    /// Waits (up to 20 s) until a linearizable read succeeds through every live member.
    public func waitUntilServing(timeout: TimeInterval = 20) throws {
        let deadline = Date().addingTimeInterval(timeout)
        for member in members where member.process?.isRunning == true {
            var options = EtcdOptions()
            options.caFile = tls?.caFile
            if tls?.requireClientCertificates == true {
                options.certFile = tls?.clientCertFile
                options.keyFile = tls?.clientKeyFile
            }
            let client = try EtcdClient(endpoints: [member.clientURL], options: options)
            while true {
                do {
                    _ = try client.range(key: Array("health".utf8))
                    break
                } catch {
                    if Date() > deadline {
                        throw EtcdClusterError("etcd member \(member.name) not serving after \(timeout) s: \(error)\n\(logs())")
                    }
                    usleep(50_000)
                }
            }
        }
    }

    /// The index of the current leader, asked through etcdctl (`endpoint status`).
    public func leaderIndex() throws -> Int? {
        for (index, member) in members.enumerated() where member.process?.isRunning == true {
            let output = try EtcdCluster.etcdctl(["--endpoints", member.clientURL, "endpoint", "status", "-w", "json"])
            guard let list = try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [[String: Any]],
                  let status = list.first?["Status"] as? [String: Any],
                  let header = status["header"] as? [String: Any],
                  let memberID = (header["member_id"] as? NSNumber)?.uint64Value,
                  let leader = (status["leader"] as? NSNumber)?.uint64Value else { continue }
            if memberID == leader { return index }
        }
        return nil
    }

    /// Kills member `index` at once (SIGKILL), as a crash would.
    public func kill(_ index: Int) {
        guard let process = members[index].process, process.isRunning else { return }
        Foundation.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// Recreates member `index` empty on the same ports with the same configuration (an
    /// operator's wiped data directory): killed, its data directory removed, launched again.
    public func wipe(_ index: Int) throws {
        kill(index)
        try FileManager.default.removeItem(at: members[index].dataDir)
        try launch(index)
    }

    /// Saves a snapshot of the cluster's data through member `index` (`etcdctl snapshot save`).
    public func saveSnapshot(to file: URL, through index: Int = 0) throws {
        try EtcdCluster.etcdctl(["--endpoints", members[index].clientURL, "snapshot", "save", file.path])
    }

    /// Restores member `index` from `snapshot` with the cluster's own name, token and peer URLs
    /// (`etcdctl snapshot restore`, so the cluster id stays the same) and launches it again.
    public func restore(_ index: Int, from snapshot: URL) throws {
        kill(index)
        let member = members[index]
        try FileManager.default.removeItem(at: member.dataDir)
        try EtcdCluster.etcdctl(["snapshot", "restore", snapshot.path, "--name", member.name, "--data-dir", member.dataDir.path,
                                 "--initial-cluster", initialCluster, "--initial-cluster-token", token,
                                 "--initial-advertise-peer-urls", member.peerURL])
        try launch(index)
    }

    /// Stops every member: SIGTERM, then SIGKILL after 1 s (a member whose peers are gone
    /// tries to hand over leadership for longer); removes the data directories.
    public func stop() {
        for member in members {
            guard let process = member.process, process.isRunning else { continue }
            process.terminate()
        }
        for member in members {
            guard let process = member.process else { continue }
            let deadline = Date().addingTimeInterval(1)
            while process.isRunning && Date() < deadline { usleep(10_000) }
            if process.isRunning {
                Foundation.kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
            }
        }
        try? FileManager.default.removeItem(at: directory)
    }

    /// The members' logs, for failure messages.
    public func logs() -> String {
        members.map { member in
            let text = (try? String(contentsOf: directory.appendingPathComponent("\(member.name).log"), encoding: .utf8)) ?? ""
            return "--- \(member.name)\n" + text.split(separator: "\n").suffix(20).joined(separator: "\n")
        }.joined(separator: "\n")
    }

    /// A throwaway CA and a server certificate for 127.0.0.1 signed by it, made with openssl in
    /// `directory`.
    public static func makeCertificates(in directory: URL) throws -> TLSFiles {
        let path = { (name: String) in directory.appendingPathComponent(name).path }
        try "subjectAltName=IP:127.0.0.1\n".write(toFile: path("san.cnf"), atomically: true, encoding: .utf8)
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        try run("/usr/bin/openssl", ["req", "-x509"] + ec + ["-keyout", path("ca.key"), "-out", path("ca.pem"),
                                                            "-days", "1", "-subj", "/CN=propbus test CA"])
        try run("/usr/bin/openssl", ["req"] + ec + ["-keyout", path("server.key"), "-out", path("server.csr"),
                                                    "-subj", "/CN=127.0.0.1"])
        try run("/usr/bin/openssl", ["x509", "-req", "-in", path("server.csr"), "-CA", path("ca.pem"), "-CAkey", path("ca.key"),
                                     "-CAcreateserial", "-out", path("server.pem"), "-days", "1", "-extfile", path("san.cnf")])
        try "extendedKeyUsage=clientAuth\n".write(toFile: path("client.cnf"), atomically: true, encoding: .utf8)
        try run("/usr/bin/openssl", ["req"] + ec + ["-keyout", path("client.key"), "-out", path("client.csr"), "-subj", "/CN=propbus"])
        try run("/usr/bin/openssl", ["x509", "-req", "-in", path("client.csr"), "-CA", path("ca.pem"), "-CAkey", path("ca.key"),
                                     "-CAcreateserial", "-out", path("client.pem"), "-days", "1", "-extfile", path("client.cnf")])
        return TLSFiles(caFile: path("ca.pem"), certFile: path("server.pem"), keyFile: path("server.key"),
                        clientCertFile: path("client.pem"), clientKeyFile: path("client.key"))
    }

    /// Runs etcdctl (v3 API) and returns its standard output; throws if it fails.
    @discardableResult
    public static func etcdctl(_ arguments: [String]) throws -> String {
        var environment = ProcessInfo.processInfo.environment
        environment["ETCDCTL_API"] = "3"
        return try run("/usr/bin/etcdctl", arguments, environment: environment)
    }

    /// Runs a program and returns its standard output; throws if it fails.
    @discardableResult
    public static func run(_ executable: String, _ arguments: [String], environment: [String: String]? = nil) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let environment { process.environment = environment }
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        let errorData = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw EtcdClusterError("\(executable) \(arguments.joined(separator: " ")) failed: \(String(decoding: errorData, as: UTF8.self))")
        }
        return String(decoding: data, as: UTF8.self)
    }
}

public struct EtcdClusterError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
