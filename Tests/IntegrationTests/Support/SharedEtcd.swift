import EtcdTestSupport
import Foundation

/// A single-member etcd shared by the fleet tests of one test process (tests keep apart by
/// prefix). `swift test --parallel` runs each test in a process of its own, so there it is one
/// etcd per test anyway; a serial run starts it once per test class.
///
/// `@unchecked Sendable`: `cluster` is only touched under `lock`.
final class SharedEtcd: @unchecked Sendable {
    static let instance = SharedEtcd()
    private let lock = NSLock()
    private var cluster: EtcdCluster?

    /// The shared member's endpoints, starting it first if needed.
    func endpoints() throws -> [String] {
        lock.lock()
        defer { lock.unlock() }
        if let cluster, cluster.members.allSatisfy({ $0.process?.isRunning == true }) { return cluster.endpoints }
        cluster?.stop()
        cluster = try EtcdCluster()
        return cluster!.endpoints
    }

    func stop() {
        lock.lock()
        defer { lock.unlock() }
        cluster?.stop()
        cluster = nil
    }
}
