import DBusValues

extension DBusValue {
    /// Whether a string anywhere inside (`s`, `o`, `g`, at any depth) holds a NUL character.
    /// D-Bus strings cannot carry one, and C reads the string as ending there, so such text
    /// (possible only from paths other than the bus: model files, a store of an older version)
    /// is refused wherever a definition takes it. Bytes (`ay`) may hold zeros.
    var holdsNULInAString: Bool {
        switch self {
        case .string(let text), .objectPath(let text), .signature(let text): text.utf8.contains(0)
        case .variant(let inner): inner.holdsNULInAString
        case .array(_, let items), .structure(let items): items.contains { $0.holdsNULInAString }
        case .dictionary(_, _, let entries): entries.contains { $0.key.holdsNULInAString || $0.value.holdsNULInAString }
        case .byte, .boolean, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double, .unixFD, .bytes: false
        }
    }
}
