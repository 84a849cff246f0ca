/// The names of propbusd's D-Bus API (docs/dbus-api.md), written once.
///
/// The daemon exports them, propctl calls them and the tests address them: every copy reads
/// them from here, so a rename can't leave one side speaking the old name.
public enum PropBusAPI {
    /// The daemon's well-known bus name.
    public static let busName = "org.propbus.PropBus1"
    /// The version of propbusd and propctl (`Manager.Version`, `--version`, the man pages).
    public static let version = "0.1.0"
    /// The root object (the Manager); every key's object lives under it.
    public static let rootPath = "/org/propbus/PropBus1"

    /// The Manager interface on ``rootPath``.
    public static let managerInterface = "org.propbus.PropBus1.Manager"
    /// The interface of each group object, whose D-Bus properties are the keys.
    public static let valuesInterface = "org.propbus.PropBus1.Values"
    /// The methods of ``valuesInterface``. A key's name is a D-Bus property of that interface,
    /// so no key may take one of these names: clients that look members up by name (pydbus,
    /// qdbus) could then reach only one of the two.
    public static let valuesMethods: Set<String> = ["Reset", "GetWithRevision", "CompareAndSet"]
    /// The interface of each binding object.
    public static let bindingInterface = "org.propbus.PropBus1.Binding"
    /// The interface of each command object.
    public static let commandInterface = "org.propbus.PropBus1.Command"

    /// The path at which a handler client exports `Run` (and `Cancel`).
    public static let handlerPath = "/org/propbus/PropBus1/Handler"
    /// The interface a handler client exports at ``handlerPath``.
    public static let handlerInterface = "org.propbus.PropBus1.Handler"

    /// The prefix of propbus's own error names (``PropBusError/Code/dbusName``).
    public static let errorPrefix = "org.propbus.PropBus1.Error."

    /// The standard `org.freedesktop.DBus.Properties` interface.
    public static let propertiesInterface = "org.freedesktop.DBus.Properties"
}
