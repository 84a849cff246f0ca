/// Whether a ``Property``'s cached value can be trusted.
public enum PropertyState: Hashable, Sendable {
    /// The cached value is the daemon's, kept fresh by its signals.
    case live
    /// The daemon is not on the bus (not started yet, restarting, or gone), or the key could not
    /// be read: the cached value is the last one known. The property resynchronizes by itself
    /// when the daemon comes back.
    case stale
    /// The key holds a value of another D-Bus type than the property was asked for: `expected`
    /// and `actual` are signatures (`"i"`, `"s"`). No value is delivered until the types agree.
    case typeMismatch(expected: String, actual: String)
}
