/// The daemon's bus name, paths and interfaces, as the client needs them.
///
/// The daemon's core (`PropBusAPI`, `Key`) has them too; the client duplicates these few lines
/// rather than link the core, which it must not depend on.
enum DaemonNames {
    static let busName = "org.propbus.PropBus1"
    static let rootPath = "/org/propbus/PropBus1"
    static let valuesInterface = "org.propbus.PropBus1.Values"
    static let managerInterface = "org.propbus.PropBus1.Manager"
    static let commandInterface = "org.propbus.PropBus1.Command"
    static let handlerInterface = "org.propbus.PropBus1.Handler"
    static let handlerPath = "/org/propbus/PropBus1/Handler"
    static let propertiesInterface = "org.freedesktop.DBus.Properties"
    static let objectManagerInterface = "org.freedesktop.DBus.ObjectManager"

    /// The group object of `key` and the key's property name on it: `ui.switch.on` is `on` of
    /// `/org/propbus/PropBus1/ui/switch` (as the core's `Key.objectPath`).
    static func locate(_ key: String) -> (path: String, name: String)? {
        guard let dot = key.lastIndex(of: "."), dot != key.startIndex, key.index(after: dot) != key.endIndex else {
            return nil
        }
        return (objectPath(of: String(key[..<dot])), String(key[key.index(after: dot)...]))
    }

    /// The object of a group or command: its dots become slashes below the root.
    static func objectPath(of dotted: String) -> String {
        rootPath + "/" + String(dotted.map { $0 == "." ? "/" : $0 })
    }
}
