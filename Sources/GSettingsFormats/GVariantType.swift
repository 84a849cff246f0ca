import DBusValues

/// A definite GVariant type, as GSettings schemas and dconf's text name them (`s`, `as`, `ms`,
/// `a{sv}`, `(ii)`, …). D-Bus lacks some of them; ``dbusType()`` says how each is stored.
public indirect enum GVariantType: Hashable, Sendable, CustomStringConvertible {
    case boolean, byte, int16, uint16, int32, uint32, int64, uint64, handle, double
    case string, objectPath, signature, variant
    case maybe(GVariantType)
    case array(GVariantType)
    case tuple([GVariantType])
    case dictEntry(GVariantType, GVariantType)

    /// Parses one complete definite type: `"a{sv}"`, `"mmi"`. Throws on anything else
    /// (indefinite types such as `*`, `?` and `r` included).
    public init(parsing text: String) throws(GVariantError) {
        var index = text.utf8.startIndex
        let bytes = text.utf8
        self = try Self.scan(bytes, &index, text: text)
        guard index == bytes.endIndex else {
            throw GVariantError("'\(text)' is not one GVariant type: it goes on after '\(String(text[..<index]))'")
        }
    }

    private static func scan(_ bytes: String.UTF8View, _ index: inout String.Index, text: String) throws(GVariantError) -> GVariantType {
        guard index < bytes.endIndex else { throw GVariantError("'\(text)' ends where a type is expected") }
        let byte = bytes[index]
        bytes.formIndex(after: &index)
        if let basic = basicTypes[byte] { return basic }
        switch byte {
        case UInt8(ascii: "m"): return .maybe(try scan(bytes, &index, text: text))
        case UInt8(ascii: "a"): return .array(try scan(bytes, &index, text: text))
        case UInt8(ascii: "("):
            var items: [GVariantType] = []
            while index < bytes.endIndex, bytes[index] != UInt8(ascii: ")") { items.append(try scan(bytes, &index, text: text)) }
            guard index < bytes.endIndex else { throw GVariantError("'\(text)' has an unclosed '('") }
            bytes.formIndex(after: &index)
            return .tuple(items)
        case UInt8(ascii: "{"):
            let key = try scan(bytes, &index, text: text)
            guard key.isBasic else { throw GVariantError("'\(text)': a dictionary key must be a basic type, not '\(key)'") }
            let value = try scan(bytes, &index, text: text)
            guard index < bytes.endIndex, bytes[index] == UInt8(ascii: "}") else { throw GVariantError("'\(text)': a dict entry holds exactly two types") }
            bytes.formIndex(after: &index)
            return .dictEntry(key, value)
        default:
            throw GVariantError("'\(text)' is not a definite GVariant type (character '\(Character(Unicode.Scalar(byte)))')")
        }
    }

    private static let basicTypes: [UInt8: GVariantType] = [
        UInt8(ascii: "b"): .boolean, UInt8(ascii: "y"): .byte, UInt8(ascii: "n"): .int16, UInt8(ascii: "q"): .uint16,
        UInt8(ascii: "i"): .int32, UInt8(ascii: "u"): .uint32, UInt8(ascii: "x"): .int64, UInt8(ascii: "t"): .uint64,
        UInt8(ascii: "h"): .handle, UInt8(ascii: "d"): .double, UInt8(ascii: "s"): .string, UInt8(ascii: "o"): .objectPath,
        UInt8(ascii: "g"): .signature, UInt8(ascii: "v"): .variant,
    ]

    /// The type string: `a{sv}`.
    public var description: String {
        switch self {
        case .boolean: "b"
        case .byte: "y"
        case .int16: "n"
        case .uint16: "q"
        case .int32: "i"
        case .uint32: "u"
        case .int64: "x"
        case .uint64: "t"
        case .handle: "h"
        case .double: "d"
        case .string: "s"
        case .objectPath: "o"
        case .signature: "g"
        case .variant: "v"
        case .maybe(let element): "m" + element.description
        case .array(let element): "a" + element.description
        case .tuple(let items): "(" + items.map(\.description).joined() + ")"
        case .dictEntry(let key, let value): "{" + key.description + value.description + "}"
        }
    }

    /// Whether it is a basic type (a dictionary key may only be one).
    public var isBasic: Bool {
        switch self {
        case .maybe, .array, .tuple, .dictEntry, .variant: false
        default: true
        }
    }

    /// Whether it is an array of one-element tuples, `a(T)`: the form a maybe type takes on
    /// D-Bus, so schemaless readers take it for one.
    var isArrayOfSingletons: Bool {
        if case .array(.tuple(let items)) = self { return items.count == 1 }
        return false
    }

    /// The D-Bus type standing for it: itself for D-Bus types, `a(T)` for `mT`. The empty tuple,
    /// a dict entry outside an array and a handle have none. Where nothing will say the type
    /// when it is read back (`schemaless`: dconf's text, which a dconf export prints again
    /// from the D-Bus type), an array of one-element tuples would read back as a maybe, and is
    /// refused too.
    public func dbusType(schemaless: Bool = false) throws(GVariantError) -> DBusType {
        try dbusType(insideVariant: schemaless)
    }

    func dbusType(insideVariant: Bool) throws(GVariantError) -> DBusType {
        switch self {
        case .boolean: return .boolean
        case .byte: return .byte
        case .int16: return .int16
        case .uint16: return .uint16
        case .int32: return .int32
        case .uint32: return .uint32
        case .int64: return .int64
        case .uint64: return .uint64
        case .double: return .double
        case .string: return .string
        case .objectPath: return .objectPath
        case .signature: return .signature
        case .variant: return .variant
        case .handle: throw GVariantError("a handle (h) means nothing once stored")
        case .maybe(let element): return .array(.structure([try element.dbusType(insideVariant: insideVariant)]))
        case .array(.dictEntry(let key, let value)):
            return .dictionary(key: try key.dbusType(insideVariant: insideVariant), value: try value.dbusType(insideVariant: insideVariant))
        case .array(let element):
            if insideVariant, isArrayOfSingletons {
                throw GVariantError("an array of one-element tuples (\(self)) would read back as a maybe type")
            }
            return .array(try element.dbusType(insideVariant: insideVariant))
        case .tuple(let items):
            guard !items.isEmpty else { throw GVariantError("the empty tuple () has no D-Bus form") }
            var fields: [DBusType] = []
            for item in items { fields.append(try item.dbusType(insideVariant: insideVariant)) }
            return .structure(fields)
        case .dictEntry:
            throw GVariantError("a dict entry outside an array (\(self)) has no D-Bus form")
        }
    }

    /// The GVariant type a D-Bus type stands for when nothing else says: an array of one-field
    /// structs is a maybe, everything else itself.
    public init(schemaless type: DBusType) {
        switch type {
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
        case .unixFD: self = .handle
        case .variant: self = .variant
        case .array(.structure(let fields)) where fields.count == 1: self = .maybe(GVariantType(schemaless: fields[0]))
        case .array(let element): self = .array(GVariantType(schemaless: element))
        case .dictionary(let key, let value): self = .array(.dictEntry(GVariantType(schemaless: key), GVariantType(schemaless: value)))
        case .structure(let fields): self = .tuple(fields.map(GVariantType.init(schemaless:)))
        }
    }
}

/// A GVariant type, text or value that cannot be read or has no D-Bus form; says why.
public struct GVariantError: Error, Equatable, Sendable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
