import DBus
import Dispatch
import PropBus
import PropBusRender
import PropBusService
import SystemKit

/// The daemon's side of renders (docs/render.md), at its edges: the store that tells the
/// ``RenderRunner`` of committed rounds, the model behind its ``RenderHost`` port, and the
/// Manager's render members. Made with the service; started by the lifecycle's "renders" step,
/// after the fleet, so the first renders read what start-up committed.
///
/// The daemon's queue's, like the service.
final class DaemonRenders {
    let committedRounds: CommittedRoundStore
    let members: RenderManagerMembers
    private(set) var runner: RenderRunner?

    init(store: any PropertyStore, access: AccessPolicy, connection: Connection) {
        committedRounds = CommittedRoundStore(store)
        members = RenderManagerMembers(access: access, connection: connection)
    }

    /// Starts rendering `declarations` from `service`'s model, and every committed round after.
    func start(_ declarations: [RenderDeclaration], service: Service, queue: DispatchQueue) {
        dispatchPrecondition(condition: .onQueue(queue))
        let runner = RenderRunner(host: ServiceRenderHost(service: service), queue: queue, loop: service.executionIO)
        self.runner = runner
        members.runner = runner
        let access = members.access
        members.mayRead = { [unowned service] key, caller in
            guard let parsed = try? Key(key), let definition = service.model.definition(for: parsed) else { return false }
            return access.mayRead(writers: definition.writers, secret: definition.secret, caller: caller)
        }
        committedRounds.observer = { [weak runner] writeSet in
            runner?.noteChanged(writeSet.changes.lazy.flatMap { $0.entries.lazy.filter(\.isChange).map(\.key.text) })
        }
        runner.load(declarations)
    }

    /// A reload applied the model files: the renders they declare now.
    func load(_ declarations: [RenderDeclaration]) {
        runner?.load(declarations)
    }

    /// Stops the programs renders run and removes what they staged; `done` once they ended.
    func stop(then done: @escaping () -> Void) {
        guard let runner else { return done() }
        runner.stop(then: done)
    }
}

/// The service's store as the renders see it: every round the store committed is passed on, a
/// consumer of committed changes as history is. A round the store refuses is never seen.
final class CommittedRoundStore: PropertyStore {
    private let store: any PropertyStore
    /// Called on the daemon's queue, in the middle of the round's end: it may only take note.
    var observer: ((WriteSet) -> Void)?

    init(_ store: any PropertyStore) {
        self.store = store
    }

    func load() throws(PropBusError) -> StoredState { try store.load() }

    func commit(_ writeSet: WriteSet, durability: StoreChanges.Durability) throws(PropBusError) {
        try store.commit(writeSet, durability: durability)
        observer?(writeSet)
    }
}

/// The model behind the renders' port: values and groups read in place, state keys as
/// read-only transient keys of group `render.NAME`, announced and committed like a command's.
final class ServiceRenderHost: RenderHost {
    private unowned let service: Service

    init(service: Service) {
        self.service = service
    }

    func renderValue(of key: String) -> (value: DBusValue, secret: Bool)? {
        guard let parsed = try? Key(key) else { return nil }
        return service.model.readableValue(for: parsed)
    }

    func renderNames(inGroup group: String) -> [String] { service.model.names(inGroup: group) }

    var renderRevision: UInt64 { service.model.revision }

    func publishRenderStatus(_ status: RenderStatus, of name: String) {
        let owner = Key(uncheckedGroup: "render", name: name)
        let model = service.model
        var changes: [PropertyChange] = []
        for (field, value, description) in [
            ("State", DBusValue.string(status.state.rawValue), "ok, waiting-for-keys, render-failed, check-failed, install-failed, reload-failed or pending"),
            ("Message", .string(status.message), "What the last run of render \(name) did, or why it wrote nothing"),
            ("Revision", .uint64(status.revision), "The model revision whose values the file rendered by \(name) holds"),
        ] {
            let key = Key(uncheckedGroup: "render.\(name)", name: field)
            changes += model.addState(key, initialValue: value, of: owner, description: description)
            changes += model.setState(key, to: value)
        }
        service.publish(changes)
        service.tree.connection.scheduleRound()
    }

    func removeRenderStatus(of name: String) {
        service.publish(service.model.removeGroup("render.\(name)"))
        service.tree.connection.scheduleRound()
    }

    func logRender(_ line: String) { Log.info(line) }
}

/// Several components' members of the Manager interface, in order.
final class ManagerExtensions: ManagerExtension {
    private let parts: [any ManagerExtension]

    init(_ parts: [any ManagerExtension]) {
        self.parts = parts
    }

    func managerMethods() -> [MethodDescription] { parts.flatMap { $0.managerMethods() } }
    func managerProperties() -> [PropertyDescription] { parts.flatMap { $0.managerProperties() } }
}
