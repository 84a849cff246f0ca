import DBus
import Dispatch
import Etcd
import Glibc
import PropBus
import PropBusService
import Synchronization
import SystemKit

extension Fleet {
    /// FleetState `unavailable` after a write could not reach etcd, and a read at once, then
    /// every second, until one answers; then `connected` again, if the watch is up.
    func markUnreachable() {
        guard state == .connected else { return }
        setState(.unavailable)
        probeUntilReachable()
    }

    ///
    /// The first read goes at once (to the next member: the client moved past the one that
    /// failed): after a leader change etcd answers again well before a second has passed.
    private func probeUntilReachable(after delay: DispatchTimeInterval = .seconds(0)) {
        let client = client, key = layout.hostsPrefix, etcdQueue = etcdQueue
        later(.now() + delay) { fleet in
            guard !fleet.stopped, fleet.state == .unavailable, fleet.watch != nil else { return }
            let bound = fleet.bound
            etcdQueue.async {
                let reachable = (try? client.range(RangeRequest(key: key, prefix: true, countOnly: true))) != nil
                bound.async { fleet in
                    guard !fleet.stopped, fleet.state == .unavailable, fleet.watch != nil else { return }
                    if reachable {
                        fleet.setState(.connected)
                        // As on the watch's connection: what a reload declared meanwhile.
                        fleet.pushLocalDefinitions()
                    } else {
                        fleet.probeUntilReachable(after: .seconds(1))
                    }
                }
            }
        }
    }

    /// How long `Manager.ListFleetHosts` waits for etcd: a person waits for `propctl status --fleet`.
    static let hostListTimeout: Duration = .seconds(1)

    /// `Manager.ListFleetHosts`: the hosts whose presence key exists. Without a connection it
    /// fails at once, and any failure is one short line (not every endpoint's attempts).
    func listHosts(_ call: MethodCall) -> MethodResult {
        guard state == .connected else {
            call.fail(PropBusError(.unavailable, "the fleet's host list cannot be read now: FleetState is \(state.rawValue)").dbusError)
            return .deferred
        }
        let id = nextID
        nextID += 1
        hostQueries[id] = call
        let client = client, layout = layout, fleet = bound
        etcdQueue.async {
            let result = Result { () throws(EtcdError) in
                try client.range(RangeRequest(key: layout.hostsPrefix, prefix: true), timeout: Self.hostListTimeout)
            }
            fleet.async { fleet in
                guard let call = fleet.hostQueries.removeValue(forKey: id) else { return }
                switch result {
                case .success(let response):
                    let names = response.kvs.compactMap { kv -> String? in
                        if case .host(let name) = layout.classify(kv.key) { name } else { nil }
                    }.sorted()
                    call.reply([.array(of: .string, names.map { .string($0) })])
                case .failure(let error):
                    let reason = switch error.code {
                    case .unavailable: "etcd cannot be reached"
                    case .timedOut: "etcd did not answer within \(Self.hostListTimeout)"
                    default: error.message.count > 160 ? String(error.message.prefix(160)) + "…" : error.message
                    }
                    call.fail(PropBusError(.unavailable, "the fleet's host list cannot be read now: \(reason)").dbusError)
                }
            }
        }
        return .deferred
    }
}
