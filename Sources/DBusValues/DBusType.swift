/// One single complete D-Bus type, as parsed from a signature.
public indirect enum DBusType: Hashable, Sendable {
    case byte, boolean, int16, uint16, int32, uint32, int64, uint64, double
    case string, objectPath, signature, unixFD
    case variant
    case array(DBusType)
    case dictionary(key: DBusType, value: DBusType)
    case structure([DBusType])

    /// The basic type (or `v`) a type code stands for; `nil` for a container's or a marker's code.
    public init?(basicCode code: TypeCode?) {
        switch code {
        case .byte: self = .byte
        case .boolean: self = .boolean
        case .int16: self = .int16
        case .uint16: self = .uint16
        case .int32: self = .int32
        case .uint32: self = .uint32
        case .int64: self = .int64
        case .uint64: self = .uint64
        case .double: self = .double
        case .string: self = .string
        case .objectPath: self = .objectPath
        case .signature: self = .signature
        case .unixFD: self = .unixFD
        case .variant: self = .variant
        default: return nil
        }
    }

    /// The type's signature text, e.g. `a{sv}`.
    public var signature: String {
        switch self {
        case .byte: "y"
        case .boolean: "b"
        case .int16: "n"
        case .uint16: "q"
        case .int32: "i"
        case .uint32: "u"
        case .int64: "x"
        case .uint64: "t"
        case .double: "d"
        case .string: "s"
        case .objectPath: "o"
        case .signature: "g"
        case .unixFD: "h"
        case .variant: "v"
        case .array(let element): "a" + element.signature
        case .dictionary(let key, let value): "a{" + key.signature + value.signature + "}"
        case .structure(let fields): "(" + fields.map(\.signature).joined() + ")"
        }
    }

    /// Whether this is a basic (non-container) type, the only kind allowed as a dict key.
    public var isBasic: Bool {
        switch self {
        case .variant, .array, .dictionary, .structure: false
        default: true
        }
    }

    /// Whether values of this type are numbers, for range checks.
    public var isNumeric: Bool {
        switch self {
        case .byte, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double: true
        default: false
        }
    }

    /// Parses a signature holding exactly one complete type.
    public init(parsing text: String) throws(SignatureError) {
        let types = try Signature(validating: text).types
        guard types.count == 1 else {
            throw SignatureError(signature: text, reason: "expected exactly one complete type, found \(types.count)")
        }
        self = types[0]
    }
}

extension DBusType: CustomStringConvertible {
    public var description: String { signature }
}
