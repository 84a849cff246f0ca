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

    let model: PropertyModel
    let store: PropertyStore
    let tree: ObjectTree

    /// Builds the object tree for `model` on `connection`. Call on the connection's queue, before
    /// requesting the bus name, so that no client can see a half-exported daemon.
    public init(connection: Connection, model: PropertyModel, store: PropertyStore) {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        self.model = model
        self.store = store
        tree = ObjectTree(connection: connection)
        tree.addObjectManager(at: Key.rootPath)
        tree.export(ExportedObject { [unowned self] in [managerDescription()] }, at: Key.rootPath)
        for group in model.groupNames { exportGroup(group) }
        for (interface, member) in Self.writeMethods { tree.declareWriteMethod(interface: interface, member: member) }
        tree.addBeforeFlushHook { [unowned self] in commit() }
    }

    /// The methods whose success must not be reported when the round's commit fails
    /// (`Properties.Set` is a write for the tree already).
    static let writeMethods = [
        (managerInterface, "CreateProperty"), (managerInterface, "DeleteProperty"), (managerInterface, "Apply"),
        (valuesInterface, "Reset"), (valuesInterface, "CompareAndSet"),
    ]

    /// Makes the round's writes durable before its replies and signals go out.
    ///
    /// If the store cannot commit, the model goes back to the last commit and the round's
    /// writes are answered with `StoreFailed` (by the tree); reads go on working.
    private func commit() -> DBusError? {
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
            }
        }
    }

    private func exportGroup(_ group: String) {
        tree.export(ExportedObject { [unowned self] in [valuesDescription(group: group)] }, at: Key.objectPath(ofGroup: group))
    }
}
