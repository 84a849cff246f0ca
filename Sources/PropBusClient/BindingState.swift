import DBus

/// What a binding's writes can do now, so a control can follow it (`g_settings_bind_writable`).
public enum BindingState: Hashable, Sendable {
    /// Writes go through.
    case live
    /// The daemon is not on the bus, or the key does not exist (yet).
    case stale
    /// The daemon refused the last write (range, choices, rights, type): `reason` is its error,
    /// `name: message`. The model was given the daemon's value back. The next accepted write
    /// makes the binding live again.
    case refused(reason: String)
    /// Another holder's override hides the key's value: writes are kept as the user's value
    /// but do not show until it ends. `by` is the holder (its bus name).
    case overridden(by: String)
    /// The key is read-only.
    case readOnly
    /// A mandatory layer file locks the key for this caller; `reason` names the file.
    case locked(reason: String)

    /// Whether a control bound this way should be enabled.
    public var isWritable: Bool {
        switch self {
        case .live, .stale: true
        case .refused, .overridden, .readOnly, .locked: false
        }
    }

    /// What a key's `ListProperties` metadata (for this caller) says about writing it.
    init(metadata: [String: DBusValue]) {
        func bool(_ name: String) -> Bool? { if case .boolean(let value)? = metadata[name]?.unwrappingVariant { value } else { nil } }
        let writable = bool("writable") ?? true
        let source = metadata["layer_source"]?.unwrappingVariant.stringValue ?? ""
        if bool("locked") == true, !writable {
            self = .locked(reason: "locked by \(source.isEmpty ? "a mandatory layer file" : source)")
        } else if !writable {
            self = .readOnly
        } else if metadata["layer"]?.unwrappingVariant.stringValue == "override" {
            self = .overridden(by: source)
        } else {
            self = .live
        }
    }

    /// What a refused write says.
    init(refusal error: PropBusClientError) {
        switch error.name {
        case "org.propbus.PropBus1.Error.Locked": self = .locked(reason: error.message)
        case "org.propbus.PropBus1.Error.ReadOnly", "org.freedesktop.DBus.Error.PropertyReadOnly": self = .readOnly
        case PropBusClientError.Name.serviceUnknown, PropBusClientError.Name.disconnected, "org.freedesktop.DBus.Error.NoReply":
            self = .stale
        default: self = .refused(reason: error.description)
        }
    }
}
