import DBusValues

/// A Swift type that travels as one D-Bus value of a fixed type.
///
/// The library's scalar types, `String`, arrays and string-keyed dictionaries of conforming types
/// conform already. A struct of your own conforms by naming its D-Bus struct type and converting
/// its fields, e.g. a point sent as `(ii)`:
///
/// ```swift
/// struct Point: DBusValueConvertible, Equatable {
///     var x: Int32, y: Int32
///     static let dbusType = DBusType.structure([.int32, .int32])
///     init(x: Int32, y: Int32) { self.x = x; self.y = y }
///     init?(dbusValue: DBusValue) {
///         guard let fields = dbusValue.structureFields(count: 2),
///               let x = Int32(dbusValue: fields[0]), let y = Int32(dbusValue: fields[1]) else { return nil }
///         self.init(x: x, y: y)
///     }
///     var dbusValue: DBusValue { .structure([x.dbusValue, y.dbusValue]) }
/// }
/// ```
public protocol DBusValueConvertible: Sendable {
    /// The D-Bus type every value of this Swift type has (`i` for `Int32`, `a{sd}` for `[String: Double]`).
    static var dbusType: DBusType { get }
    /// Decodes a value of ``dbusType``; `nil` when `dbusValue` has another type or shape.
    init?(dbusValue: DBusValue)
    /// The value as sent on the bus; its type is ``dbusType``.
    var dbusValue: DBusValue { get }
}

extension DBusValue {
    /// The fields of a struct value that has exactly `count` of them, else `nil`; for
    /// ``DBusValueConvertible`` conformances of your own structs.
    public func structureFields(count: Int) -> [DBusValue]? {
        guard case .structure(let fields) = self, fields.count == count else { return nil }
        return fields
    }
}

extension Bool: DBusValueConvertible {
    public static var dbusType: DBusType { .boolean }
    public init?(dbusValue: DBusValue) { guard case .boolean(let value) = dbusValue else { return nil }; self = value }
    public var dbusValue: DBusValue { .boolean(self) }
}

extension UInt8: DBusValueConvertible {
    public static var dbusType: DBusType { .byte }
    public init?(dbusValue: DBusValue) { guard case .byte(let value) = dbusValue else { return nil }; self = value }
    public var dbusValue: DBusValue { .byte(self) }
}

extension Int16: DBusValueConvertible {
    public static var dbusType: DBusType { .int16 }
    public init?(dbusValue: DBusValue) { guard case .int16(let value) = dbusValue else { return nil }; self = value }
    public var dbusValue: DBusValue { .int16(self) }
}

extension UInt16: DBusValueConvertible {
    public static var dbusType: DBusType { .uint16 }
    public init?(dbusValue: DBusValue) { guard case .uint16(let value) = dbusValue else { return nil }; self = value }
    public var dbusValue: DBusValue { .uint16(self) }
}

extension Int32: DBusValueConvertible {
    public static var dbusType: DBusType { .int32 }
    public init?(dbusValue: DBusValue) { guard case .int32(let value) = dbusValue else { return nil }; self = value }
    public var dbusValue: DBusValue { .int32(self) }
}

extension UInt32: DBusValueConvertible {
    public static var dbusType: DBusType { .uint32 }
    public init?(dbusValue: DBusValue) { guard case .uint32(let value) = dbusValue else { return nil }; self = value }
    public var dbusValue: DBusValue { .uint32(self) }
}

extension Int64: DBusValueConvertible {
    public static var dbusType: DBusType { .int64 }
    public init?(dbusValue: DBusValue) { guard case .int64(let value) = dbusValue else { return nil }; self = value }
    public var dbusValue: DBusValue { .int64(self) }
}

extension UInt64: DBusValueConvertible {
    public static var dbusType: DBusType { .uint64 }
    public init?(dbusValue: DBusValue) { guard case .uint64(let value) = dbusValue else { return nil }; self = value }
    public var dbusValue: DBusValue { .uint64(self) }
}

extension Double: DBusValueConvertible {
    public static var dbusType: DBusType { .double }
    public init?(dbusValue: DBusValue) { guard case .double(let value) = dbusValue else { return nil }; self = value }
    public var dbusValue: DBusValue { .double(self) }
}

extension String: DBusValueConvertible {
    public static var dbusType: DBusType { .string }
    public init?(dbusValue: DBusValue) { guard case .string(let value) = dbusValue else { return nil }; self = value }
    public var dbusValue: DBusValue { .string(self) }
}

extension Array: DBusValueConvertible where Element: DBusValueConvertible {
    public static var dbusType: DBusType { .array(Element.dbusType) }
    public init?(dbusValue: DBusValue) {
        switch dbusValue {
        case .array(let element, let items) where element == Element.dbusType:
            var decoded: [Element] = []
            decoded.reserveCapacity(items.count)
            for item in items {
                guard let element = Element(dbusValue: item) else { return nil }
                decoded.append(element)
            }
            self = decoded
        case .bytes(let bytes) where Element.dbusType == .byte:
            // `ay` is always `.bytes`; Element is UInt8 here, checked by its D-Bus type.
            var decoded: [Element] = []
            decoded.reserveCapacity(bytes.count)
            for byte in bytes {
                guard let element = Element(dbusValue: .byte(byte)) else { return nil }
                decoded.append(element)
            }
            self = decoded
        default:
            return nil
        }
    }
    public var dbusValue: DBusValue { .array(of: Element.dbusType, map(\.dbusValue)) }
}

extension Dictionary: DBusValueConvertible where Key == String, Value: DBusValueConvertible {
    public static var dbusType: DBusType { .dictionary(key: .string, value: Value.dbusType) }
    public init?(dbusValue: DBusValue) {
        guard case .dictionary(.string, let valueType, let entries) = dbusValue, valueType == Value.dbusType else { return nil }
        var decoded: [String: Value] = [:]
        for entry in entries {
            guard case .string(let key) = entry.key, let value = Value(dbusValue: entry.value) else { return nil }
            decoded[key] = value
        }
        self = decoded
    }
    /// Entries in key order (by UTF-8 bytes), so the same dictionary is always the same bytes.
    public var dbusValue: DBusValue {
        let sorted = sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
        return .dictionary(key: .string, value: Value.dbusType, sorted.map { DictionaryEntry(.string($0.key), $0.value.dbusValue) })
    }
}
