import CDBus
import Dispatch
import Glibc

/// The tree's shape: object managers, intermediate nodes, children, and each object's properties.
extension ObjectTree {
    // MARK: Tree structure

    /// The nearest object-manager path strictly above `path`.
    func manager(above path: String) -> String? {
        managerPaths.filter { $0 != path && (path.hasPrefix($0 == "/" ? "/" : $0 + "/")) }.max { $0.count < $1.count }
    }

    func isIntermediateNode(_ path: String) -> Bool {
        let prefix = path == "/" ? "/" : path + "/"
        return managerPaths.contains(path) || objects.keys.contains { $0.hasPrefix(prefix) }
    }

    /// Names of the direct children of `path`, for introspection.
    func childNames(of path: String) -> [String] {
        let prefix = path == "/" ? "/" : path + "/"
        var names = Set<String>()
        for key in objects.keys where key.hasPrefix(prefix) {
            let rest = key.dropFirst(prefix.count)
            if let first = rest.split(separator: "/").first { names.insert(String(first)) }
        }
        return names.sorted()
    }

    /// The interfaces exported at `path`, standard ones included (for introspection).
    func allInterfaces(at path: String) -> [InterfaceDescription] {
        standardInterfaces(for: path, exported: objects[path] != nil) + (objects[path]?.interfaces() ?? [])
    }

    /// The `a{sv}` a `GetAll` of `interface` returns: readable properties whose getter succeeds
    /// and that `call`'s sender may read; for a broadcast (`call` is `nil`), only unrestricted ones.
    /// How each readable property of `interface` is signalled. A computed table says only which
    /// are restricted: those are the ones a broadcast (`inBroadcast`, the names its property
    /// dictionary carries) leaves out, invalidated by name; the others are emitted with their
    /// values, which are not read again.
    func signalledProperties(_ interface: InterfaceDescription, inBroadcast: Set<String>) -> [String: ChangeSignal] {
        switch interface.properties {
        case .fixed(let list):
            return Dictionary(list.filter { $0.access != .write }.map { ($0.name, $0.changeSignal) }, uniquingKeysWith: { first, _ in first })
        case .dynamic(let names, let lookup):
            return Dictionary(names().compactMap(lookup).map { ($0.name, $0.changeSignal) }, uniquingKeysWith: { first, _ in first })
        case .computed(let table):
            return Dictionary(table.names().map { ($0, inBroadcast.contains($0) ? ChangeSignal.emits : .invalidates) },
                              uniquingKeysWith: { first, _ in first })
        }
    }

    /// The names of `interface`'s readable properties, without describing each one.
    func propertyNames(_ interface: InterfaceDescription) -> [String] {
        switch interface.properties {
        case .fixed(let list): list.filter { $0.access != .write }.map(\.name)
        case .dynamic(let names, _): names()
        case .computed(let table): table.names()
        }
    }

    func propertyDictionary(_ interface: InterfaceDescription, for call: MethodCall?) -> DBusValue {
        .dictionary(key: .string, value: .variant, interface.properties.all.compactMap { property in
            guard property.access != .write else { return nil }
            if let authorize = property.authorizeRead {
                guard let call, (try? authorize(call)) != nil else { return nil }
            }
            guard let value = try? property.get() else { return nil }
            // A broadcast (InterfacesAdded) leaves a large value out: the object's own
            // PropertiesChanged invalidates it, and readers Get it.
            if call == nil, value.wireSize() > signalCharges.maximumValueSize { return nil }
            return DictionaryEntry(.string(property.name), .variant(value))
        })
    }

    /// Writes what ``propertyDictionary(_:for:)`` returns, straight into a reply.
    func writePropertyDictionary(_ interface: InterfaceDescription, for call: MethodCall?, to writer: inout MessageBodyWriter) {
        writer.dictionary("{sv}") { dictionary in
            var all: Set<String>? = nil
            writeProperties(interface, for: call, to: &dictionary, seen: &all)
        }
    }

    /// Writes the `{sv}` entries of ``propertyDictionary(_:for:)``; names in `seen` are left
    /// out and the written ones added (GetAll of every interface lists a name once); `nil`
    /// writes them all.
    func writeProperties(_ interface: InterfaceDescription, for call: MethodCall?, to writer: inout MessageBodyWriter,
                         seen: inout Set<String>?) {
        if case .computed(let table) = interface.properties {
            table.forEach { name, value, restricted in
                if restricted {
                    guard let call, let property = table.lookup(name), let authorize = property.authorizeRead,
                          (try? authorize(call)) != nil else { return }
                }
                if seen != nil, !seen!.insert(name).inserted { return }
                writer.entry(name, value)
            }
            return
        }
        for property in interface.properties.all {
            guard property.access != .write else { continue }
            if let authorize = property.authorizeRead {
                guard let call, (try? authorize(call)) != nil else { continue }
            }
            guard let value = try? property.get() else { continue }
            if seen != nil, !seen!.insert(property.name).inserted { continue }
            writer.entry(property.name, value)
        }
    }

    /// Objects strictly below `path`, for `GetManagedObjects`.
    func managedObjects(below path: String) -> [(String, ExportedObject)] {
        let prefix = path == "/" ? "/" : path + "/"
        return objects.filter { $0.key.hasPrefix(prefix) }.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }

    func isObjectManager(_ path: String) -> Bool { managerPaths.contains(path) }
}
