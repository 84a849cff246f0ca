import DBusValues
import Glibc

/// A registered property: its type, registered default and metadata.
///
/// Compact, since the daemon holds one per property: the metadata most properties
/// leave at its default (description, range, choices, writers, state, source) lives out of line,
/// in one shared immutable box that is `nil` when all of it is at its default.
public struct PropertyDefinition: Hashable, Sendable {
    public var key: Key
    public var type: DBusType
    /// The registered default, read whenever no value is stored.
    public var defaultValue: DBusValue
    /// Whether values survive restarts (`persistent`, default true).
    public var persistent = true
    /// Whether clients may set it (`writable`, default true).
    public var writable = true
    /// Whether only writers may read it (a secret: others get it redacted, docs/security.md).
    public var secret = false
    private var rare: Rare?

    public var description: String {
        get { rare?.fields.description ?? "" }
        set { updateRare { $0.description = newValue } }
    }
    /// Inclusive numeric bounds, for numeric types.
    public var minimum: DBusValue? {
        get { rare?.fields.minimum }
        set { updateRare { $0.minimum = newValue } }
    }
    public var maximum: DBusValue? {
        get { rare?.fields.maximum }
        set { updateRare { $0.maximum = newValue } }
    }
    /// The allowed values, when restricted.
    public var choices: [DBusValue]? {
        get { rare?.fields.choices }
        set { updateRare { $0.choices = newValue } }
    }
    /// Who may write (docs/security.md); stored now, enforced with access control.
    public var writers: [String]? {
        get { rare?.fields.writers }
        set { updateRare { $0.writers = newValue } }
    }
    /// The command whose state this read-only key is (`Enabled`, `Executing`, `Executions`).
    public var stateOf: Key? {
        get { rare?.fields.stateOf }
        set { updateRare { $0.stateOf = newValue } }
    }
    /// The model file that declared it; `nil` for a property created at run time. A key whose
    /// file no longer declares it leaves the bus at the next reload or start.
    public var source: String? {
        get { rare?.fields.source }
        set { updateRare { $0.source = newValue } }
    }
    /// The uid that created it (`CreateProperty`), charged with it and with its stored value
    /// (``Quota/properties``, ``Quota/storedBytes``); `nil`: the daemon's own (a model file, a
    /// command's state) or created without access control. Not a `CreateProperty` option: the
    /// store keeps it on its own.
    public var creator: UInt32? {
        get { rare?.fields.creator }
        set { updateRare { $0.creator = newValue } }
    }
    /// Where the property lives: on this host only, or shared by the fleet through etcd
    /// (`scope`, default local; see docs/fleet.md).
    public var scope: PropertyScope = .local

    /// The out-of-line metadata. Immutable and shared between copies; a change makes a new box,
    /// and metadata all at its default is no box (so equal definitions compare equal).
    private final class Rare: Hashable, Sendable {
        struct Fields: Hashable, Sendable {
            var description = ""
            var minimum: DBusValue?
            var maximum: DBusValue?
            var choices: [DBusValue]?
            var writers: [String]?
            var stateOf: Key?
            var source: String?
            var creator: UInt32?
        }
        let fields: Fields
        init(_ fields: Fields) { self.fields = fields }
        static func == (lhs: Rare, rhs: Rare) -> Bool { lhs === rhs || lhs.fields == rhs.fields }
        func hash(into hasher: inout Hasher) { hasher.combine(fields) }
    }

    /// Takes `other`'s metadata box when the metadata is equal, so that many definitions with
    /// the same metadata (a model file's keys, which all name their file) share one box.
    mutating func shareMetadata(with other: PropertyDefinition) {
        guard let rare, let shared = other.rare, rare !== shared, rare.fields == shared.fields else { return }
        self.rare = shared
    }

    private mutating func updateRare(_ change: (inout Rare.Fields) -> Void) {
        var fields = rare?.fields ?? Rare.Fields()
        change(&fields)
        rare = fields == Rare.Fields() ? nil : Rare(fields)
    }

    public init(key: Key, type: DBusType, defaultValue: DBusValue) {
        self.key = key
        self.type = type
        self.defaultValue = defaultValue
    }

    /// The option names `CreateProperty` accepts.
    /// The longest description, in UTF-8 bytes.
    public static let maximumDescriptionLength = 4096

    public static let optionNames = ["persistent", "writable", "description", "minimum", "maximum", "choices", "value", "writers", "secret", "scope"]

    /// Applies `CreateProperty` options; returns the initial `value` option, if given.
    public mutating func apply(options: [String: DBusValue]) throws(PropBusError) -> DBusValue? {
        var initial: DBusValue?
        for (name, raw) in options.sorted(by: { $0.key < $1.key }) {
            let value = raw.unwrappingVariant
            func expect(_ what: String) -> PropBusError {
                .invalidArgs("option '\(name)' of \(key) must be \(what), got '\(value.signature)'")
            }
            guard !value.holdsNULInAString else {
                throw .invalidArgs("option '\(name)' of \(key) holds a NUL character (U+0000), which D-Bus strings cannot carry")
            }
            switch name {
            case "persistent":
                guard let b = value.boolValue else { throw expect("a boolean (b)") }
                persistent = b
            case "writable":
                guard let b = value.boolValue else { throw expect("a boolean (b)") }
                writable = b
            case "secret":
                guard let b = value.boolValue else { throw expect("a boolean (b)") }
                secret = b
            case "description":
                guard case .string(let s) = value else { throw expect("a string (s)") }
                // Descriptions travel in every ListProperties and GetManagedObjects reply.
                guard s.utf8.count <= Self.maximumDescriptionLength else {
                    throw PropBusError(.limitsExceeded, "description of \(key) is \(s.utf8.count) bytes; the limit is \(Self.maximumDescriptionLength) bytes")
                }
                description = s
            case "minimum", "maximum":
                guard type.isNumeric else {
                    throw .invalidArgs("option '\(name)' of \(key) needs a numeric type, but the type is '\(type.signature)'")
                }
                guard value.numericValue != nil else { throw expect("a number") }
                if name == "minimum" { minimum = value } else { maximum = value }
            case "choices":
                guard case .array(_, let items) = value else { throw expect("an array of variants (av)") }
                let unwrapped = items.map(\.unwrappingVariant)
                for choice in unwrapped where choice.type != type {
                    throw .invalidArgs("choice \(ValueDescription.short(choice)) of \(key) has type '\(choice.signature)', expected '\(type.signature)'")
                }
                choices = unwrapped
            case "writers":
                guard case .array(.string, let items) = value else { throw expect("an array of strings (as)") }
                writers = items.compactMap(\.stringValue)
            case "scope":
                guard case .string(let s) = value, let parsed = PropertyScope(rawValue: s) else {
                    throw expect("\"local\" or \"fleet\" (s)")
                }
                scope = parsed
            case "value":
                initial = value
            case "source":
                guard case .string(let s) = value else { throw expect("a string (s)") }
                source = s.isEmpty ? nil : s
            default:
                throw .invalidArgs("unknown option '\(name)' for \(key); expected one of: \(Self.optionNames.joined(separator: ", "))")
            }
        }
        if let minimum, let maximum, let lo = minimum.numericValue, let hi = maximum.numericValue, lo > hi {
            throw .invalidArgs("minimum \(ValueDescription.short(minimum)) of \(key) is above maximum \(ValueDescription.short(maximum))")
        }
        return initial
    }

    /// Whether its text (description, writers) holds a NUL, as an older version stored from a
    /// model file: every reply carrying it would be unsendable.
    var holdsNUL: Bool {
        description.utf8.contains(0) || writers?.contains { $0.utf8.contains(0) } == true
    }

    /// How deep a value may nest (``DBusValue/nestingDepth``): replies put a value at most 7
    /// levels deep (`GetManagedObjects`' `a{oa{sa{sv}}}`, the `choices` in `ListProperties`'
    /// metadata), and libdbus refuses a message nested deeper than 64 in all.
    public static let maximumNestingDepth = DBusValue.maximumMessageDepth - 7

    /// Whether `value` can go out in any reply that carries a property value (no fd, and not
    /// nested deeper than ``maximumNestingDepth``), for values kept from older versions.
    public static func canSendBack(_ value: DBusValue) -> Bool {
        !value.containsUnixFD && value.nestingDepth <= maximumNestingDepth
    }

    /// Refuses a type holding a unix fd: the number the daemon receives is its own duplicate,
    /// meaningless once the call is over (after a restart it would name whatever is open then).
    public static func checkStorable(_ type: DBusType, key: Key) throws(PropBusError) {
        guard !type.containsUnixFD else {
            throw .invalidArgs("type '\(type.signature)' of \(key) holds a unix fd ('h'); fds cannot be stored, since an fd number means nothing once the call is over")
        }
    }

    /// Checks a value against the type, range and choices; `maximumSize` in wire bytes.
    public func check(_ value: DBusValue, maximumSize: Int) throws(PropBusError) {
        // First, so that an fd is named as the problem even where the type does not match;
        // a variant can carry one whatever the declared type says.
        guard !value.containsUnixFD else {
            throw .invalidArgs("value for \(key) holds a unix fd ('h'); fds cannot be stored, since an fd number means nothing once the call is over")
        }
        guard value.type == type else {
            throw .invalidArgs("property \(key) has type '\(type.signature)', got '\(value.signature)'")
        }
        do { try value.validate() } catch {
            // The reason may quote the value (an object path).
            throw PropBusError(.invalidValue, secret ? "value refused for \(key): it breaks the D-Bus wire rules" : "invalid value for \(key): \(error.reason)")
        }
        // Accepted here, it would make every reply that carries it unsendable, for everyone.
        let depth = value.nestingDepth
        guard depth <= Self.maximumNestingDepth else {
            throw PropBusError(.invalidValue, "value for \(key) nests \(depth) levels deep (variants, structs, arrays, dict entries); at most \(Self.maximumNestingDepth) fit in the replies that carry it (GetManagedObjects, ListProperties)")
        }
        let size = value.wireSize()
        guard size <= maximumSize else {
            throw PropBusError(.limitsExceeded, "value for \(key) is \(size) bytes; the limit is \(maximumSize) bytes")
        }
        if minimum != nil || maximum != nil {
            let below = minimum.map { Self.compare(value, $0) == .orderedAscending } ?? false
            let above = maximum.map { Self.compare(value, $0) == .orderedDescending } ?? false
            if below || above || Self.isNaN(value) {
                let range = (minimum.map(ValueDescription.short) ?? "") + "…" + (maximum.map(ValueDescription.short) ?? "")
                throw PropBusError(.outOfRange, refusal(of: value) + " is out of range \(range)")
            }
        }
        if let choices, !choices.contains(value) {
            throw PropBusError(.invalidValue, refusal(of: value) + " is not one of: \(choices.map(ValueDescription.short).joined(separator: ", "))")
        }
    }

    /// "value 42 for KEY", or for a secret key "value refused for KEY": the message may reach
    /// someone who may not read the key (a log, a model file's problems, a hidden value's reason).
    private func refusal(of value: DBusValue) -> String {
        secret ? "value refused for \(key): it" : "value \(ValueDescription.short(value)) for \(key)"
    }

    private static func isNaN(_ value: DBusValue) -> Bool {
        if case .double(let d) = value { return d.isNaN }
        return false
    }

    /// How one number compares with another; Foundation's `ComparisonResult`, which the
    /// daemon does not link.
    enum Order { case orderedAscending, orderedSame, orderedDescending }

    /// Orders two numbers exactly: integers as integers (64-bit bounds stay exact), anything
    /// with a double as doubles.
    static func compare(_ a: DBusValue, _ b: DBusValue) -> Order {
        func integer(_ v: DBusValue) -> (negative: Bool, magnitude: UInt64)? {
            switch v {
            case .byte(let x): (false, UInt64(x))
            case .uint16(let x): (false, UInt64(x))
            case .uint32(let x): (false, UInt64(x))
            case .uint64(let x): (false, x)
            case .int16(let x): (x < 0, x.magnitude.toUInt64)
            case .int32(let x): (x < 0, x.magnitude.toUInt64)
            case .int64(let x): (x < 0, x.magnitude)
            default: nil
            }
        }
        if let x = integer(a), let y = integer(b) {
            if x.negative != y.negative { return x.negative ? .orderedAscending : .orderedDescending }
            if x.magnitude == y.magnitude { return .orderedSame }
            return (x.magnitude < y.magnitude) != x.negative ? .orderedAscending : .orderedDescending
        }
        let x = a.numericValue ?? 0, y = b.numericValue ?? 0
        return x < y ? .orderedAscending : (x > y ? .orderedDescending : .orderedSame)
    }

    /// The metadata dictionary of `ListProperties`, without the per-value entries.
    public var metadata: [String: DBusValue] {
        var result: [String: DBusValue] = [
            "default": defaultValue,
            "persistent": .boolean(persistent),
            "writable": .boolean(writable),
            "description": .string(description),
            "secret": .boolean(secret),
        ]
        if let minimum { result["minimum"] = minimum }
        if let maximum { result["maximum"] = maximum }
        if let choices { result["choices"] = .array(of: .variant, choices.map { .variant($0) }) }
        if let writers { result["writers"] = .array(of: .string, writers.map { .string($0) }) }
        if let stateOf { result["state_of"] = .string(stateOf.text) }
        if let source { result["source"] = .string(source) }
        // Only when shared: local is the default, and every existing reply stays as it was.
        if scope == .fleet { result["scope"] = .string(scope.rawValue) }
        return result
    }
}

/// Where a property lives (`scope` option).
public enum PropertyScope: String, Hashable, Sendable {
    /// On this host only (the default).
    case local
    /// Shared by every host of the fleet through etcd: definition and value.
    case fleet
}

/// Short renderings of values for error messages.
enum ValueDescription {
    static func short(_ value: DBusValue) -> String {
        switch value {
        case .string(let s): return "'" + (s.count > 40 ? String(s.prefix(40)) + "…" : s) + "'"
        case .boolean(let b): return b ? "true" : "false"
        case .byte(let v): return String(v)
        case .int16(let v): return String(v)
        case .uint16(let v): return String(v)
        case .int32(let v): return String(v)
        case .uint32(let v): return String(v)
        case .int64(let v): return String(v)
        case .uint64(let v): return String(v)
        case .double(let v): return String(v)
        default: return "a '\(value.signature)' value"
        }
    }
}

private extension FixedWidthInteger where Self: UnsignedInteger {
    var toUInt64: UInt64 { UInt64(self) }
}
