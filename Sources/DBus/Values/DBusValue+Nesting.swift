/// What a value holds that matters once it is kept and sent again: unix fds and nesting depth.
extension DBusValue {
    /// Whether a unix fd (`h`) appears anywhere in the value, including inside variants.
    ///
    /// An fd number is only meaningful inside the message that carried it: the receiver gets a
    /// duplicate with a number of its own, which means nothing to anyone once stored.
    public var containsUnixFD: Bool {
        switch self {
        case .unixFD: true
        case .variant(let inner): inner.containsUnixFD
        case .array(let element, let items): element.containsUnixFD || items.contains { $0.containsUnixFD }
        case .dictionary(let key, let value, let entries):
            key.containsUnixFD || value.containsUnixFD || entries.contains { $0.key.containsUnixFD || $0.value.containsUnixFD }
        case .structure(let fields): fields.contains { $0.containsUnixFD }
        default: false
        }
    }

    /// How many levels libdbus's body validation descends into this value: variants, structs,
    /// dict entries and non-empty arrays of non-fixed types each add one (fixed arrays are
    /// checked as a block). A value that starts `n` levels deep in a message is valid only if
    /// `n + nestingDepth` stays within ``maximumTotalDepth`` (64).
    public var nestingDepth: Int {
        switch self {
        case .variant(let inner):
            return 1 + inner.nestingDepth
        case .array(let element, let items):
            guard !items.isEmpty, !Self.isFixed(element) else { return 0 }
            return 1 + items.reduce(0) { max($0, $1.nestingDepth) }
        case .dictionary(_, _, let entries):
            // The array, then each entry as a container of its own.
            guard !entries.isEmpty else { return 0 }
            return 2 + entries.reduce(0) { max($0, max($1.key.nestingDepth, $1.value.nestingDepth)) }
        case .structure(let fields):
            return 1 + fields.reduce(0) { max($0, $1.nestingDepth) }
        default:
            return 0
        }
    }

    /// The deepest nesting a message body may have (libdbus: twice the 32 of
    /// `DBUS_MAXIMUM_TYPE_RECURSION_DEPTH`, counting variants too).
    public static var maximumMessageDepth: Int { maximumTotalDepth }
}

extension DBusType {
    /// Whether `h` appears anywhere in the type.
    public var containsUnixFD: Bool {
        switch self {
        case .unixFD: true
        case .array(let element): element.containsUnixFD
        case .dictionary(let key, let value): key.containsUnixFD || value.containsUnixFD
        case .structure(let fields): fields.contains { $0.containsUnixFD }
        default: false
        }
    }
}
