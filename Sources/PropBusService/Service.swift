import DBus
import Dispatch
import PropBus

/// The daemon's brain: exports a ``PropertyModel`` over D-Bus.
///
/// Confined to the connection's queue: the model, the object tree and this service are only
/// touched there.
public final class Service {
    /// The well-known bus name.
    public static let busName = "org.propbus.PropBus1"
    /// The daemon's version, exposed as `Manager.Version`.
    public static let version = "0.1.0"
    static let managerInterface = "org.propbus.PropBus1.Manager"
    static let valuesInterface = "org.propbus.PropBus1.Values"

    static let bindingInterface = "org.propbus.PropBus1.Binding"

    /// Service-wide settings from the daemon's options.
    public struct Options: Sendable {
        /// The most bindings one connection may hold (`--max-bindings-per-client`).
        public var maximumBindingsPerClient = 64

        public init(maximumBindingsPerClient: Int = 64) {
            self.maximumBindingsPerClient = maximumBindingsPerClient
        }
    }

    /// Signals the service needs; the daemon subscribes to them before owning its name, so that
    /// no client can make a binding whose end it would miss.
    public static let matchRules = [
        MatchRule(sender: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged"),
    ]

    let model: PropertyModel
    let store: PropertyStore
    let tree: ObjectTree
    let options: Options
    /// Binding objects currently exported, so a rolled-back round can be undone.
    private var exportedBindings: Set<UInt64> = []

    /// Builds the object tree for `model` on `connection`. Call on the connection's queue, before
    /// requesting the bus name, so that no client can see a half-exported daemon.
    public init(connection: Connection, model: PropertyModel, store: PropertyStore, options: Options = Options()) {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        self.model = model
        self.store = store
        self.options = options
        tree = ObjectTree(connection: connection)
        tree.addObjectManager(at: Key.rootPath)
        tree.export(ExportedObject { [unowned self] in [managerDescription()] }, at: Key.rootPath)
        for group in model.groupNames { exportGroup(group) }
        for binding in model.bindings.all { exportBinding(binding) }
        for (interface, member) in Self.writeMethods { tree.declareWriteMethod(interface: interface, member: member) }
        tree.addBeforeFlushHook { [unowned self] in commit() }
        connection.addSignalHandler(matching: Self.matchRules[0]) { [unowned self] message in
            // A connection that leaves the bus ends its non-persistent bindings.
            guard let args = try? message.arguments(), args.count == 3,
                  let name = args[0].stringValue, name.hasPrefix(":"), args[2].stringValue == "" else { return }
            publish(model.unbindAll(ownedBy: name))
        }
    }

    /// The methods whose success must not be reported when the round's commit fails
    /// (`Properties.Set` is a write for the tree already).
    static let writeMethods = [
        (managerInterface, "CreateProperty"), (managerInterface, "DeleteProperty"), (managerInterface, "Apply"),
        (valuesInterface, "Reset"), (valuesInterface, "CompareAndSet"),
        (managerInterface, "Bind"), (managerInterface, "Unbind"),
    ]

    /// Makes the round's writes durable before its replies and signals go out.
    ///
    /// If the store cannot commit, the model goes back to the last commit and the round's
    /// writes are answered with `StoreFailed` (by the tree); reads go on working.
    func commit() -> DBusError? {
        do {
            try store.commit()
            model.commitRound()
            return nil
        } catch {
            store.rollback()
            let touched = model.rollbackRound()
            // Groups created or emptied in the round were exported or unexported; undo that too.
            // The tree drops the signals this queues, with the rest of the round's.
            for group in Set(touched.map(\.group)) {
                let exported = tree.object(at: Key.objectPath(ofGroup: group)) != nil
                let exists = !model.names(inGroup: group).isEmpty
                if exists, !exported { exportGroup(group) }
                if !exists, exported { tree.unexport(Key.objectPath(ofGroup: group)) }
            }
            let current = Set(model.bindings.all.map(\.id))
            for id in exportedBindings.subtracting(current) { unexportBinding(id) }
            for binding in model.bindings.all where !exportedBindings.contains(binding.id) { exportBinding(binding) }
            return error.dbusError
        }
    }

    /// Turns model changes into exported objects and coalesced signals.
    func publish(_ changes: [PropertyChange]) {
        for change in changes {
            let key = change.key
            let path = key.objectPath
            switch change {
            case .created:
                if tree.object(at: path) == nil {
                    exportGroup(key.group)
                } else {
                    // A new property of an existing group: announce it to cached proxies.
                    tree.noteChange(path: path, interface: Self.valuesInterface, property: key.name, oldValue: nil)
                }
            case .redefined:
                break
            case .valueChanged(_, let old):
                tree.noteChange(path: path, interface: Self.valuesInterface, property: key.name, oldValue: old)
            case .deleted:
                if model.names(inGroup: key.group).isEmpty { tree.unexport(path) }
            case .bound(let binding):
                exportBinding(binding)
            case .unbound(let binding):
                unexportBinding(binding.id)
            }
        }
    }

    private func exportBinding(_ binding: Binding) {
        exportedBindings.insert(binding.id)
        tree.export(ExportedObject { [unowned self] in [bindingDescription(binding)] }, at: Self.path(ofBinding: binding.id))
    }

    private func unexportBinding(_ id: UInt64) {
        exportedBindings.remove(id)
        tree.unexport(Self.path(ofBinding: id))
    }

    private func exportGroup(_ group: String) {
        tree.export(ExportedObject { [unowned self] in [valuesDescription(group: group)] }, at: Key.objectPath(ofGroup: group))
    }
}
