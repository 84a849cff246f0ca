/// A D-Bus value of any type.
///
/// Containers carry their element types, so an empty array still knows its signature.
/// `ay` is always represented as ``bytes(_:)``, never as an array of ``byte(_:)``; use
/// ``array(of:_:)`` to build arrays and get that normalization for free.
public enum DBusValue: Hashable, Sendable {
    case byte(UInt8)
    case boolean(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(String)
    case signature(String)
    case unixFD(Int32)
    indirect case variant(DBusValue)
    /// An array of `element`-typed values (never `y`: see ``bytes(_:)``; ``validate()`` refuses
    /// an array of `y`).
    case array(element: DBusType, [DBusValue])
    /// An `ay` byte array.
    case bytes([UInt8])
    /// An `a{kv}` dictionary, in wire order.
    indirect case dictionary(key: DBusType, value: DBusType, [DictionaryEntry])
    /// A struct; it has at least one field.
    case structure([DBusValue])

    /// Builds an array value, normalizing `ay` to ``bytes(_:)``.
    public static func array(of element: DBusType, _ items: [DBusValue]) -> DBusValue {
        if element == .byte {
            return .bytes(items.map { if case .byte(let b) = $0 { b } else { 0 } })
        }
        return .array(element: element, items)
    }

    /// The value's complete type.
    public var type: DBusType {
        switch self {
        case .byte: .byte
        case .boolean: .boolean
        case .int16: .int16
        case .uint16: .uint16
        case .int32: .int32
        case .uint32: .uint32
        case .int64: .int64
        case .uint64: .uint64
        case .double: .double
        case .string: .string
        case .objectPath: .objectPath
        case .signature: .signature
        case .unixFD: .unixFD
        case .variant: .variant
        case .array(let element, _): .array(element)
        case .bytes: .array(.byte)
        case .dictionary(let key, let value, _): .dictionary(key: key, value: value)
        case .structure(let fields): .structure(fields.map(\.type))
        }
    }

    /// The value's signature text.
    public var signature: String { type.signature }

    /// The payload of a `v` value, or the value itself.
    public var unwrappingVariant: DBusValue {
        if case .variant(let inner) = self { return inner.unwrappingVariant }
        return self
    }
}

/// One entry of a D-Bus dictionary.
public struct DictionaryEntry: Hashable, Sendable {
    public var key: DBusValue
    public var value: DBusValue

    public init(_ key: DBusValue, _ value: DBusValue) {
        self.key = key
        self.value = value
    }
}

extension DBusValue {
    /// Convenience accessors, `nil` when the case differs.
    public var stringValue: String? {
        switch self {
        case .string(let s), .objectPath(let s), .signature(let s): s
        default: nil
        }
    }

    /// The boolean payload, if this is `b`.
    public var boolValue: Bool? { if case .boolean(let b) = self { b } else { nil } }

    /// The value as a `Double`, for any numeric type.
    public var numericValue: Double? {
        switch self {
        case .byte(let v): Double(v)
        case .int16(let v): Double(v)
        case .uint16(let v): Double(v)
        case .int32(let v): Double(v)
        case .uint32(let v): Double(v)
        case .int64(let v): Double(v)
        case .uint64(let v): Double(v)
        case .double(let v): v
        default: nil
        }
    }

    /// Items of an `a{sv}`-style dictionary with string keys, as a Swift dictionary.
    public var stringKeyedEntries: [String: DBusValue]? {
        guard case .dictionary(_, _, let entries) = self else { return nil }
        var result: [String: DBusValue] = [:]
        for entry in entries {
            guard let key = entry.key.stringValue else { return nil }
            result[key] = entry.value
        }
        return result
    }

    /// Builds an `a{sv}` from a Swift dictionary, with keys in sorted order for stable output.
    public static func vardict(_ items: [String: DBusValue]) -> DBusValue {
        .dictionary(key: .string, value: .variant, items.sorted { $0.key < $1.key }.map {
            DictionaryEntry(.string($0.key), .variant($0.value))
        })
    }
}
