import DBusValues

/// A GVariant value: what dconf stores and GSettings reads. Containers carry their element
/// types, so an empty array or a `nothing` still knows its type.
public indirect enum GVariantValue: Sendable {
    case boolean(Bool)
    case byte(UInt8)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case handle(Int32)
    case double(Double)
    case string(String)
    case objectPath(String)
    case signature(String)
    case variant(GVariantValue)
    /// `just` a value, or `nothing`, of maybe type `m` + `element`.
    case maybe(element: GVariantType, GVariantValue?)
    case array(element: GVariantType, [GVariantValue])
    case tuple([GVariantValue])
    case dictEntry(GVariantValue, GVariantValue)

    /// The value's type.
    public var type: GVariantType {
        switch self {
        case .boolean: .boolean
        case .byte: .byte
        case .int16: .int16
        case .uint16: .uint16
        case .int32: .int32
        case .uint32: .uint32
        case .int64: .int64
        case .uint64: .uint64
        case .handle: .handle
        case .double: .double
        case .string: .string
        case .objectPath: .objectPath
        case .signature: .signature
        case .variant: .variant
        case .maybe(let element, _): .maybe(element)
        case .array(let element, _): .array(element)
        case .tuple(let items): .tuple(items.map(\.type))
        case .dictEntry(let key, let value): .dictEntry(key.type, value.type)
        }
    }

    /// The value in D-Bus form (docs/dconf.md, "Types"): itself for D-Bus types; `nothing` an
    /// empty array of one-field structs and `just x` that array holding `(x)`. Throws for what
    /// D-Bus cannot hold (see ``GVariantType/dbusType(schemaless:)``).
    public func dbusValue(schemaless: Bool = false) throws(GVariantError) -> DBusValue {
        try dbusValue(insideVariant: schemaless)
    }

    private func dbusValue(insideVariant: Bool) throws(GVariantError) -> DBusValue {
        switch self {
        case .boolean(let b): return .boolean(b)
        case .byte(let y): return .byte(y)
        case .int16(let n): return .int16(n)
        case .uint16(let q): return .uint16(q)
        case .int32(let i): return .int32(i)
        case .uint32(let u): return .uint32(u)
        case .int64(let x): return .int64(x)
        case .uint64(let t): return .uint64(t)
        case .double(let d): return .double(d)
        case .string(let s): return .string(s)
        case .objectPath(let o): return .objectPath(o)
        case .signature(let g): return .signature(g)
        case .handle: throw GVariantError("a handle (h) means nothing once stored")
        case .variant(let inner): return .variant(try inner.dbusValue(insideVariant: true))
        case .maybe(let element, let value):
            let field = try element.dbusType(insideVariant: insideVariant)
            let items = try value.map { v throws(GVariantError) in [DBusValue.structure([try v.dbusValue(insideVariant: insideVariant)])] } ?? []
            return .array(of: .structure([field]), items)
        case .array(.dictEntry(let keyType, let valueType), let entries):
            var converted: [DictionaryEntry] = []
            for entry in entries {
                guard case .dictEntry(let key, let value) = entry else { throw GVariantError("an a{..} holds a non-entry") }
                converted.append(DictionaryEntry(try key.dbusValue(insideVariant: insideVariant), try value.dbusValue(insideVariant: insideVariant)))
            }
            return .dictionary(key: try keyType.dbusType(insideVariant: insideVariant), value: try valueType.dbusType(insideVariant: insideVariant), converted)
        case .array(let element, let items):
            let type = try GVariantType.array(element).dbusType(insideVariant: insideVariant)
            guard case .array(let dbusElement) = type else { return .bytes([]) }
            var converted: [DBusValue] = []
            for item in items { converted.append(try item.dbusValue(insideVariant: insideVariant)) }
            return .array(of: dbusElement, converted)
        case .tuple(let items):
            guard !items.isEmpty else { throw GVariantError("the empty tuple () has no D-Bus form") }
            var fields: [DBusValue] = []
            for item in items { fields.append(try item.dbusValue(insideVariant: insideVariant)) }
            return .structure(fields)
        case .dictEntry:
            throw GVariantError("a dict entry outside an array has no D-Bus form")
        }
    }

    /// The GVariant value a D-Bus value stands for, read as `type` says (a schema's type), or
    /// when `type` is nil schemaless: an array of one-field structs is a maybe. Nil when the
    /// value does not fit the type (a "maybe" of two elements).
    public init?(dbus value: DBusValue, as type: GVariantType? = nil) {
        let type = type ?? GVariantType(schemaless: value.type)
        switch (type, value) {
        case (.boolean, .boolean(let b)): self = .boolean(b)
        case (.byte, .byte(let y)): self = .byte(y)
        case (.int16, .int16(let n)): self = .int16(n)
        case (.uint16, .uint16(let q)): self = .uint16(q)
        case (.int32, .int32(let i)): self = .int32(i)
        case (.uint32, .uint32(let u)): self = .uint32(u)
        case (.int64, .int64(let x)): self = .int64(x)
        case (.uint64, .uint64(let t)): self = .uint64(t)
        case (.handle, .unixFD(let h)): self = .handle(h)
        case (.double, .double(let d)): self = .double(d)
        case (.string, .string(let s)): self = .string(s)
        case (.objectPath, .objectPath(let o)): self = .objectPath(o)
        case (.signature, .signature(let g)): self = .signature(g)
        case (.variant, .variant(let inner)):
            guard let decoded = GVariantValue(dbus: inner) else { return nil }
            self = .variant(decoded)
        case (.maybe(let element), .array(_, let items)):
            guard items.count <= 1 else { return nil }
            guard let item = items.first else { self = .maybe(element: element, nil); return }
            guard case .structure(let fields) = item, fields.count == 1, let inner = GVariantValue(dbus: fields[0], as: element) else { return nil }
            self = .maybe(element: element, inner)
        case (.array(.byte), .bytes(let bytes)): self = .array(element: .byte, bytes.map { .byte($0) })
        case (.array(.dictEntry(let keyType, let valueType)), .dictionary(_, _, let entries)):
            var items: [GVariantValue] = []
            for entry in entries {
                guard let key = GVariantValue(dbus: entry.key, as: keyType), let value = GVariantValue(dbus: entry.value, as: valueType) else { return nil }
                items.append(.dictEntry(key, value))
            }
            self = .array(element: .dictEntry(keyType, valueType), items)
        case (.array(let element), .array(_, let items)):
            var converted: [GVariantValue] = []
            for item in items {
                guard let value = GVariantValue(dbus: item, as: element) else { return nil }
                converted.append(value)
            }
            self = .array(element: element, converted)
        case (.tuple(let types), .structure(let fields)) where types.count == fields.count:
            var items: [GVariantValue] = []
            for (field, fieldType) in zip(fields, types) {
                guard let value = GVariantValue(dbus: field, as: fieldType) else { return nil }
                items.append(value)
            }
            self = .tuple(items)
        default:
            return nil
        }
    }
}
