import DBus

extension Expression {
    /// Converts an evaluation result to `type` (int64 → i/u/y/... with range check, int → d,
    /// etc.), or throws `.transformFailed` naming both types.
    ///
    /// Only identical kinds convert: any integer to any integer or to `d` (range-checked), a
    /// whole `d` to an integer, a string to `s`, `o` or `g` (validated), containers element by
    /// element. Nothing is stringified implicitly; `string()` does that. The same type passes
    /// through, a variant is unwrapped for a non-variant target, and a `v` target wraps.
    public static func convert(_ value: DBusValue, to type: DBusType) throws(PropBusError) -> DBusValue {
        if type == .variant {
            if case .variant = value { return value }
            return .variant(value)
        }
        let value = value.unwrappingVariant
        if value.type == type { return value }
        switch (value, type) {
        case (_, .byte), (_, .int16), (_, .uint16), (_, .int32), (_, .uint32), (_, .int64), (_, .uint64):
            return try integer(value, to: type)
        case (_, .double):
            switch value {
            case .byte(let v): return .double(Double(v))
            case .int16(let v): return .double(Double(v))
            case .uint16(let v): return .double(Double(v))
            case .int32(let v): return .double(Double(v))
            case .uint32(let v): return .double(Double(v))
            case .int64(let v): return .double(Double(v))
            case .uint64(let v): return .double(Double(v))
            default: break
            }
        case (.string(let s), .string), (.objectPath(let s), .string), (.signature(let s), .string):
            return .string(s)
        case (.string(let s), .objectPath), (.signature(let s), .objectPath):
            guard ObjectPath.isValid(s) else {
                throw PropBusError(.transformFailed, "\"\(ExpressionLexer.abbreviated(s))\" is not a valid object path, so it does not fit 'object_path'")
            }
            return .objectPath(s)
        case (.string(let s), .signature), (.objectPath(let s), .signature):
            do throws(SignatureError) {
                _ = try Signature(validating: s)
            } catch {
                throw PropBusError(.transformFailed, "\(error), so it does not fit 'signature'")
            }
            return .signature(s)
        case (.array(_, let items), .array(let element)):
            return .array(of: element, try convertAll(items, to: element))
        case (.bytes(let bytes), .array(let element)):
            return .array(of: element, try convertAll(bytes.map { .byte($0) }, to: element))
        case (.dictionary(_, _, let entries), .dictionary(let keyType, let valueType)):
            var converted: [DictionaryEntry] = []
            for entry in entries {
                converted.append(DictionaryEntry(try convert(entry.key, to: keyType), try convert(entry.value, to: valueType)))
            }
            return .dictionary(key: keyType, value: valueType, converted)
        case (.structure(let fields), .structure(let types)) where fields.count == types.count:
            var converted: [DBusValue] = []
            for (field, fieldType) in zip(fields, types) { converted.append(try convert(field, to: fieldType)) }
            return .structure(converted)
        default:
            break
        }
        throw mismatch(value, type)
    }

    private static func convertAll(_ items: [DBusValue], to type: DBusType) throws(PropBusError) -> [DBusValue] {
        var converted: [DBusValue] = []
        converted.reserveCapacity(items.count)
        for item in items { converted.append(try convert(item, to: type)) }
        return converted
    }

    private static func mismatch(_ value: DBusValue, _ type: DBusType) -> PropBusError {
        let hint = switch type {
        case .string: "; use string() to make a string"
        case .byte, .int16, .uint16, .int32, .uint32, .int64, .uint64: value.stringValue != nil || value.boolValue != nil ? "; use int() to make a number" : ""
        case .double: value.stringValue != nil || value.boolValue != nil ? "; use double() to make a number" : ""
        case .boolean: value.stringValue != nil || value.numericValue != nil ? "; use bool() or a comparison to make a boolean" : ""
        default: ""
        }
        return PropBusError(.transformFailed, "cannot convert '\(value.type.name)' to '\(type.name)'\(hint)")
    }

    /// An integer of any width, or a whole double, as an integer of `type`.
    private static func integer(_ value: DBusValue, to type: DBusType) throws(PropBusError) -> DBusValue {
        // Magnitude and sign separately, so every Int64 and UInt64 value is exact.
        let negative: Bool
        let magnitude: UInt64
        let shown: String
        switch value {
        case .byte(let v): (negative, magnitude, shown) = (false, UInt64(v), "\(v)")
        case .int16(let v): (negative, magnitude, shown) = (v < 0, UInt64(v.magnitude), "\(v)")
        case .uint16(let v): (negative, magnitude, shown) = (false, UInt64(v), "\(v)")
        case .int32(let v): (negative, magnitude, shown) = (v < 0, UInt64(v.magnitude), "\(v)")
        case .uint32(let v): (negative, magnitude, shown) = (false, UInt64(v), "\(v)")
        case .int64(let v): (negative, magnitude, shown) = (v < 0, v.magnitude, "\(v)")
        case .uint64(let v): (negative, magnitude, shown) = (false, v, "\(v)")
        case .double(let v):
            guard v.isFinite, v == v.rounded(.towardZero) else {
                throw PropBusError(.transformFailed, "\(v) ('double') does not fit '\(type.name)': it is not a whole number; use int() to truncate")
            }
            guard v.magnitude < 18_446_744_073_709_551_616.0 else {
                throw PropBusError(.transformFailed, "\(v) does not fit '\(type.name)'")
            }
            (negative, magnitude, shown) = (v < 0, UInt64(v.magnitude), "\(v)")
        default:
            throw mismatch(value, type)
        }
        func fit<T: FixedWidthInteger>(_: T.Type) throws(PropBusError) -> T {
            let result: T? = negative
                ? (T.isSigned && magnitude <= UInt64(T.min.magnitude) ? T(truncatingIfNeeded: 0 &- magnitude) : nil)
                : T(exactly: magnitude)
            guard let result else {
                throw PropBusError(.transformFailed, "\(shown) does not fit '\(type.name)' (\(T.min)...\(T.max))")
            }
            return result
        }
        switch type {
        case .byte: return .byte(try fit(UInt8.self))
        case .int16: return .int16(try fit(Int16.self))
        case .uint16: return .uint16(try fit(UInt16.self))
        case .int32: return .int32(try fit(Int32.self))
        case .uint32: return .uint32(try fit(UInt32.self))
        case .int64: return .int64(try fit(Int64.self))
        default: return .uint64(try fit(UInt64.self))
        }
    }
}
