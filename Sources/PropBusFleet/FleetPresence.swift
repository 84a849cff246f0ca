import Dispatch
import Etcd
import SystemKit

/// This host's presence key, `PREFIX/hosts/NAME`, kept alive under a 10 s lease and renewed
/// every 3 s on a queue of its own, so that a keepalive waiting for a dead member never delays
/// a write's fail-fast answer on the D-Bus queue.
///
/// Its state (the lease, the timer) belongs to that queue alone: ``Fleet`` holds it as a
/// ``LoopBound`` and reaches it only by hopping there.
final class FleetPresence {
    private let client: any EtcdPort
    private let key: [UInt8]
    private let hostName: String
    private let queue: DispatchQueue
    private var lease: Int64 = 0
    private var timer: DispatchSourceTimer?

    /// Made on the D-Bus queue and handed over to `queue` at once.
    static func make(client: any EtcdPort, key: [UInt8], hostName: String, on queue: DispatchQueue) -> LoopBound<FleetPresence> {
        LoopBound.handOver(FleetPresence(client: client, key: key, hostName: hostName, queue: queue), to: queue)
    }

    private init(client: any EtcdPort, key: [UInt8], hostName: String, queue: DispatchQueue) {
        self.client = client
        self.key = key
        self.hostName = hostName
        self.queue = queue
    }

    deinit {
        timer?.cancel()
    }

    /// Puts the key now and keeps it alive; on the presence queue.
    func start() {
        dispatchPrecondition(condition: .onQueue(queue))
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now(), repeating: .seconds(3))
        let presence = LoopBound(weak: self, on: queue)
        timer.setEventHandler { presence.object()?.renew() }
        self.timer = timer
        timer.resume()
    }

    /// Stops renewing and gives the key up (bounded by the request timeout); on the presence queue.
    func stop() {
        dispatchPrecondition(condition: .onQueue(queue))
        timer?.cancel()
        timer = nil
        if lease != 0 { try? client.revoke(lease: lease) }
        lease = 0
    }

    /// Keeps the key alive under its lease; grants a new one when it expired.
    private func renew() {
        if lease != 0 {
            do throws(EtcdError) {
                _ = try client.keepAlive(lease: lease)
                return
            } catch {
                if error.code != .leaseNotFound { return }
                lease = 0
            }
        }
        do throws(EtcdError) {
            let granted = try client.grantLease(ttl: 10)
            try client.put(key: key, value: Array(hostName.utf8), lease: granted.id)
            lease = granted.id
        } catch {
            // The next tick tries again.
        }
    }
}
