/// A declarative description of one D-Bus interface, in the spirit of sd-bus vtables.
///
/// Introspection, `org.freedesktop.DBus.Properties`, argument checking and the standard error
/// replies are all derived from it, so they cannot drift from what the object does.
public struct InterfaceDescription {
    /// The interface name.
    public var name: String
    /// Methods, by name.
    public var methods: [String: MethodDescription]
    /// The interface's properties, fixed or computed per object.
    public var properties: PropertyTable
    /// Signals, for introspection.
    public var signals: [SignalDescription]
    /// Interface-level annotations, e.g. `org.freedesktop.DBus.Property.EmitsChangedSignal`.
    public var annotations: [(name: String, value: String)]

    public init(_ name: String, methods: [MethodDescription] = [], properties: PropertyTable = .fixed([]),
                signals: [SignalDescription] = [], annotations: [(name: String, value: String)] = []) {
        self.name = name
        self.methods = Dictionary(methods.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        self.properties = properties
        self.signals = signals
        self.annotations = annotations
    }
}

/// What a method handler returns: the reply arguments now, or a promise to reply later through
/// ``MethodCall/reply(_:)``.
public enum MethodResult {
    case reply([DBusValue])
    /// The reply's arguments, written straight into the message (big replies, hot paths): sized
    /// first, like every reply, then built without a ``DBusValue`` tree.
    case stream(ReplyBody)
    case deferred
}

/// A method of an interface.
public struct MethodDescription {
    public var name: String
    /// Input arguments: names and one complete type each.
    public var inArguments: [(name: String, type: DBusType)]
    /// Output arguments.
    public var outArguments: [(name: String, type: DBusType)]
    /// Runs on the connection's queue with arguments already checked against `inArguments`.
    public var handler: (MethodCall) throws(DBusError) -> MethodResult
    /// The signature callers must send; computed once, checked on every call.
    public let inSignature: String
    /// Whether the method changes state: if a before-flush hook (the store's commit) fails the
    /// round, its success reply becomes the hook's error instead of a success never made durable.
    public var writes: Bool
    /// The privilege a call needs, checked by the tree before ``handler`` runs.
    public var access: MethodAccess

    /// Types are given as ``DBusType`` values, not signature text, so there is nothing to parse
    /// and nothing that could fail at run time.
    public init(_ name: String, in inArguments: [(String, DBusType)] = [], out outArguments: [(String, DBusType)] = [],
                writes: Bool = false, access: MethodAccess = .none, handler: @escaping (MethodCall) throws(DBusError) -> MethodResult) {
        self.name = name
        self.writes = writes
        self.access = access
        self.inArguments = inArguments.map { (name: $0.0, type: $0.1) }
        self.outArguments = outArguments.map { (name: $0.0, type: $0.1) }
        self.handler = handler
        inSignature = inArguments.map(\.1.signature).joined()
    }
}

/// A signal of an interface.
public struct SignalDescription {
    public var name: String
    public var arguments: [(name: String, type: DBusType)]

    public init(_ name: String, _ arguments: [(String, DBusType)] = []) {
        self.name = name
        self.arguments = arguments.map { (name: $0.0, type: $0.1) }
    }
}

/// How a property announces its changes (`org.freedesktop.DBus.Property.EmitsChangedSignal`).
public enum ChangeSignal: String, Sendable {
    /// PropertiesChanged carries the new value.
    case emits = "true"
    /// PropertiesChanged lists the name without a value.
    case invalidates
    /// Never changes.
    case const
    /// Changes are not signalled.
    case none = "false"
}

/// A property of an interface, with its accessors.
public struct PropertyDescription {
    public enum Access: String, Sendable { case read, write, readwrite }

    public var name: String
    public var type: DBusType
    public var access: Access
    public var changeSignal: ChangeSignal
    /// Reads the current value; runs on the connection's queue.
    public var get: () throws(DBusError) -> DBusValue
    /// Writes a value already checked against `type`; `nil` for read-only properties.
    public var set: ((DBusValue, MethodCall) throws(DBusError) -> Void)?
    /// Decides whether the caller may read the value, throwing the error to reply with
    /// (`AccessDenied`); `nil` when everyone may.
    ///
    /// A property with a check is *restricted*: `Get` runs the check, `GetAll` and
    /// `GetManagedObjects` leave the property out for callers it refuses, and broadcasts, which
    /// anyone may receive, never carry its value: `InterfacesAdded` leaves it out and
    /// `PropertiesChanged` lists it as invalidated. Introspection still lists it.
    public var authorizeRead: ((MethodCall) throws(DBusError) -> Void)?
    /// Replaces ``set`` for a write whose reply may have to wait (``MethodResult/deferred``,
    /// answered later through the call): `Properties.Set` returns what it returns.
    public var deferrableSet: ((DBusValue, MethodCall) throws(DBusError) -> MethodResult)?
    /// The access introspection shows the sender of `call`, for a property whose writability
    /// depends on the caller (a key locked for some); `nil`: ``access`` for everyone.
    public var accessForCaller: ((MethodCall) -> Access)?

    public init(_ name: String, type: DBusType, access: Access = .read, changeSignal: ChangeSignal = .emits,
                get: @escaping () throws(DBusError) -> DBusValue,
                set: ((DBusValue, MethodCall) throws(DBusError) -> Void)? = nil) {
        self.name = name
        self.type = type
        self.access = set == nil ? .read : access
        self.changeSignal = changeSignal
        self.get = get
        self.set = set
    }
}

/// An interface's properties: a fixed list, or a table computed per object (for objects whose
/// properties are defined at run time).
public enum PropertyTable {
    case fixed([PropertyDescription])
    case dynamic(names: () -> [String], lookup: (String) -> PropertyDescription?)
    /// A dynamic table that can also read values without describing each property, for the
    /// hot paths: `Get`, `GetAll` and `GetManagedObjects`.
    case computed(ComputedProperties)

    /// Every property, in introspection order.
    public var all: [PropertyDescription] {
        switch self {
        case .fixed(let list): list
        case .dynamic(let names, let lookup): names().compactMap(lookup)
        case .computed(let table): table.names().compactMap(table.lookup)
        }
    }

    /// One property by name.
    public func lookup(_ name: String) -> PropertyDescription? {
        switch self {
        case .fixed(let list): list.first { $0.name == name }
        case .dynamic(_, let lookup): lookup(name)
        case .computed(let table): table.lookup(name)
        }
    }
}

/// A property table computed per object, with direct reads of its values.
///
/// `names` and `lookup` describe the properties as ``PropertyTable/dynamic(names:lookup:)``
/// does; `value` and `forEach` read values without building a ``PropertyDescription`` (and its
/// closures) per property. Both must agree with `lookup`: every property is readable, and a
/// *restricted* one (whose description has ``PropertyDescription/authorizeRead``) is reported as
/// such, so the tree asks `lookup` for its check.
public struct ComputedProperties {
    public var names: () -> [String]
    public var lookup: (String) -> PropertyDescription?
    /// The value of the unrestricted property `name`; `nil` if there is none or it is
    /// restricted (the tree then goes through `lookup`).
    public var value: (String) -> DBusValue?
    /// Visits every property in `names` order: its name, value and whether it is restricted.
    public var forEach: (_ visit: (_ name: String, _ value: DBusValue, _ restricted: Bool) -> Void) -> Void
    /// The value of the property `name` and whether it is restricted; `nil` if there is none.
    /// The flush reads it for `PropertiesChanged` (a restricted property is invalidated by name);
    /// without it, the flush asks `lookup`.
    public var read: ((String) -> (value: DBusValue, restricted: Bool)?)?
    /// `Properties.Set` of the property `name` to `value` (not yet checked against its type):
    /// what the call returns, or `nil` if there is no such property (`UnknownProperty`). It
    /// refuses a read-only property itself (`PropertyReadOnly`). Without it, `Set` goes through
    /// `lookup`'s description.
    public var set: ((_ name: String, _ value: DBusValue, _ call: MethodCall) throws(DBusError) -> MethodResult?)?

    public init(names: @escaping () -> [String], lookup: @escaping (String) -> PropertyDescription?,
                value: @escaping (String) -> DBusValue?,
                forEach: @escaping (_ visit: (_ name: String, _ value: DBusValue, _ restricted: Bool) -> Void) -> Void,
                read: ((String) -> (value: DBusValue, restricted: Bool)?)? = nil,
                set: ((_ name: String, _ value: DBusValue, _ call: MethodCall) throws(DBusError) -> MethodResult?)? = nil) {
        self.names = names
        self.lookup = lookup
        self.value = value
        self.forEach = forEach
        self.read = read
        self.set = set
    }
}
