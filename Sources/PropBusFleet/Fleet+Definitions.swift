import DBus
import Dispatch
import Etcd
import Glibc
import PropBus
import PropBusService
import Synchronization
import SystemKit

extension Fleet {
    /// Fleet-scoped definitions etcd has never seen (created while the daemon ran without
    /// --fleet, or declared by a model file) are offered to the fleet, unless someone defined
    /// the key meanwhile (then theirs comes through the watch).
    func pushLocalDefinitions() {
        let model = service.model
        for entry in model.list() where entry.definition.scope == .fleet && (revisions[entry.definition.key]?.definition ?? 0) == 0 {
            let key = entry.definition.key
            var operations: [RequestOp] = [.put(layout.definitionKey(key), FleetLayout.encodeDefinition(entry.definition))]
            if let stored = entry.storedValue { operations.append(.put(layout.valueKey(key), FleetLayout.encodeValue(stored))) }
            let success = operations
            let compares = [Compare.modRevision(of: layout.definitionKey(key), is: 0)]
            let client = client, fleet = bound
            etcdQueue.async {
                guard let response = try? client.txn(compares: compares, success: success, failure: [], resendIfConnectionLost: false, timeout: nil),
                      response.succeeded else { return }
                fleet.async { fleet in
                    let revision = response.header.revision
                    var known = fleet.revisions[key] ?? FleetRevisions()
                    guard abs(known.definition) < revision else { return }
                    known.definition = revision
                    if success.count > 1 { known.value = revision }
                    fleet.service.model.storeChanges.saveExternalRevisions(known, for: key)
                    if fleet.service.commit() == nil { fleet.revisions[key] = known }
                }
            }
        }
    }
}
