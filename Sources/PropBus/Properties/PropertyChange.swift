import DBusValues

/// What a model mutation changed.
///
/// The binding cases are boxed: a `Binding` inline made every change (a model file's 10k
/// `created`) several times larger to copy.
public enum PropertyChange: Hashable, Sendable {
    /// A new property exists.
    case created(Key)
    /// A property's metadata changed but not its value.
    case redefined(Key)
    /// A property's value changed from `old`.
    case valueChanged(Key, old: DBusValue)
    /// A property was removed; `old` was its value.
    case deleted(Key, old: DBusValue)
    /// A binding was made.
    indirect case bound(Binding)
    /// A binding ended.
    indirect case unbound(Binding)

    /// The key concerned (a binding's following side).
    public var key: Key {
        switch self {
        case .created(let key), .redefined(let key), .valueChanged(let key, _), .deleted(let key, _): key
        case .bound(let binding), .unbound(let binding): binding.key
        }
    }
}
