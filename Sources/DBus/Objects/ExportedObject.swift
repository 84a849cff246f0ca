import CDBus
import Dispatch
import Glibc

/// An exported object: its own interface descriptions (the tree adds the standard ones).
///
/// The list is built once, on first use; what changes at run time lives in dynamic
/// ``PropertyTable``s, which are consulted on every call.
public final class ExportedObject {
    private let make: () -> [InterfaceDescription]
    private var cached: [InterfaceDescription]?

    public init(interfaces: @escaping () -> [InterfaceDescription]) { make = interfaces }

    /// The value readers of the object's computed tables, by interface name, built with the
    /// list; `nil` when the object describes `org.freedesktop.DBus.Properties` itself (then its
    /// own description decides every `Get`). Kept apart so the fast `Get` copies one closure, not
    /// an interface's description (its method table and the table's six closures).
    private var valueReaders: [(name: String, read: (String) -> DBusValue?)]?

    /// The object's own interfaces.
    public func interfaces() -> [InterfaceDescription] {
        if let cached { return cached }
        let built = make()
        cached = built
        valueReaders = built.contains { $0.name == ObjectTree.propertiesInterface } ? nil : built.compactMap { interface in
            guard case .computed(let table) = interface.properties else { return nil }
            return (interface.name, table.value)
        }
        return built
    }

    /// The reader of the computed table of the interface whose name is the C string `name`.
    func valueReader(interface name: UnsafePointer<CChar>) -> ((String) -> DBusValue?)? {
        if cached == nil { _ = interfaces() }
        guard let valueReaders else { return nil }
        let length = strlen(name)
        for index in valueReaders.indices {
            // Bytes compared in place: no String made from the call's interface name.
            let matches = valueReaders[index].name.utf8.withContiguousStorageIfAvailable { bytes in
                bytes.count == length && memcmp(bytes.baseAddress!, name, length) == 0
            } ?? (valueReaders[index].name == String(cString: name))
            if matches { return valueReaders[index].read }
        }
        return nil
    }

    /// One of the object's own interfaces, by name.
    public func interface(named name: String) -> InterfaceDescription? {
        interfaces().first { $0.name == name }
    }
}
