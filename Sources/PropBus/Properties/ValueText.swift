import DBusValues

/// The text form of D-Bus values that `propctl` reads and prints.
///
/// Text is always read against a known type (the property's), so it can stay friendly:
///
/// - Scalars are plain text. `b` accepts `true`/`false`, `yes`/`no`, `on`/`off`, `1`/`0`, in
///   any case. Integers (`y n q i u x t h`) are decimal or `0x` hex with an optional sign, and
///   must fit the type. `d` is any decimal or hex float, or `inf`, `-inf`, `nan`. `s` is the text
///   exactly as given, with no quoting. `o` must be a valid object path and `g` a valid signature.
/// - Containers are JSON. Arrays are JSON arrays; `ay` is a JSON array of numbers or a JSON string
///   (its UTF-8 bytes). Dicts are JSON objects whose keys are converted to the key type, so
///   `a{ib}` reads `{"1": true}`. Structs are JSON arrays with one element per field.
/// - Inside JSON, a value of a basic type may also be a JSON string in the scalar syntax above
///   (`["0x10", "inf"]` for `ad`); for `s`, `o` and `g` the JSON string *is* the value.
/// - A variant's type is inferred from its JSON, never stated: `true` → `b`, an integer → `x`
///   (or `t` above `Int64.max`), any other number → `d`, a string → `s`, an array of strings
///   (including `[]`) → `as`, any other array → `av`, an object → `a{sv}`; `null` is an error.
///   A top-level `v` whose text is not JSON is read as a plain string.
///
/// Printing mirrors reading: ``format(_:)`` prints scalars plain and containers as compact JSON,
/// so `parse(format(v), as: v.type) == v` for every value that contains no variant whose type
/// differs from the inferred one, no NaN, and no string with a NUL byte. ``json(_:)`` prints
/// everything as JSON, for `--json`.
public enum ValueText {
    // MARK: Reading

    /// Reads `text` as a value of `type`, in the syntax described on ``ValueText``.
    ///
    /// The result also obeys the D-Bus wire rules (no NUL in strings, nesting limits).
    public static func parse(_ text: String, as type: DBusType) throws(ValueTextError) -> DBusValue {
        let value: DBusValue
        switch type {
        case .variant:
            if let json = try? JSONValue.parse(text) {
                value = .variant(try inferredValue(from: json, at: ValuePath()))
            } else {
                value = .variant(try parseScalar(text, as: .string))
            }
        case .array, .dictionary, .structure:
            let json: JSONValue
            do {
                json = try JSONValue.parse(text)
            } catch {
                throw ValueTextError("expected \(expectation(for: type)): \(error.description)", withoutValue: "expected \(expectation(for: type))")
            }
            value = try self.value(from: json, as: type)
        default:
            value = try parseScalar(text, as: type)
        }
        do {
            try value.validate()
        } catch {
            throw ValueTextError("value of type '\(type.signature)' breaks the D-Bus rules: \(error.reason)")
        }
        return value
    }

    /// Converts an already-parsed JSON value to a value of `type`, with the container rules of
    /// ``parse(_:as:)`` (used for whole JSON documents such as `propctl load`).
    ///
    /// A JSON string for a non-string basic type is read in the scalar syntax.
    public static func value(from json: JSONValue, as type: DBusType) throws(ValueTextError) -> DBusValue {
        try value(from: json, as: type, at: ValuePath())
    }

    /// Reads a variant's payload from JSON by inference (see ``ValueText``), without the
    /// surrounding ``DBusValue/variant(_:)``.
    public static func inferredValue(from json: JSONValue) throws(ValueTextError) -> DBusValue {
        try inferredValue(from: json, at: ValuePath())
    }

    /// Reads plain scalar text as a value of the basic type `type`.
    ///
    /// Surrounding whitespace is ignored for numbers and booleans; `s` keeps the text exactly.
    public static func parseScalar(_ text: String, as type: DBusType) throws(ValueTextError) -> DBusValue {
        switch type {
        case .boolean:
            switch text.trimmingWhitespace.lowercased() {
            case "true", "yes", "on", "1": return .boolean(true)
            case "false", "no", "off", "0": return .boolean(false)
            default: throw refused("a boolean (true/false) for type 'b'", text)
            }
        case .byte: return .byte(try integer(text, as: type))
        case .int16: return .int16(try integer(text, as: type))
        case .uint16: return .uint16(try integer(text, as: type))
        case .int32: return .int32(try integer(text, as: type))
        case .uint32: return .uint32(try integer(text, as: type))
        case .int64: return .int64(try integer(text, as: type))
        case .uint64: return .uint64(try integer(text, as: type))
        case .unixFD: return .unixFD(try integer(text, as: type))
        case .double: return .double(try double(text))
        case .string:
            guard !text.utf8.contains(0) else { throw ValueTextError("a string of type 's' may not contain a NUL character") }
            return .string(text)
        case .objectPath:
            guard ObjectPath.isValid(text) else {
                throw refused("an object path for type 'o' (like /org/example/Thing)", text)
            }
            return .objectPath(text)
        case .signature:
            do {
                _ = try Signature(validating: text)
            } catch {
                throw ValueTextError("expected a signature for type 'g', got \(quoted(text)): \(error.reason)", withoutValue: "expected a signature for type 'g'")
            }
            return .signature(text)
        case .variant, .array, .dictionary, .structure:
            throw ValueTextError("type '\(type.signature)' is not a scalar type")
        }
    }

    // MARK: Printing

    /// The friendly text of `value`: scalars plain (`true`, `42`, `3.5`, `hello`, `inf`),
    /// containers as compact JSON.
    ///
    /// A variant prints its payload plainly when that text reads back as the same variant, and
    /// as JSON otherwise (so a variant holding the string `"true"` prints with quotes).
    public static func format(_ value: DBusValue) -> String {
        switch value {
        case .byte(let v): String(v)
        case .boolean(let v): v ? "true" : "false"
        case .int16(let v): String(v)
        case .uint16(let v): String(v)
        case .int32(let v): String(v)
        case .uint32(let v): String(v)
        case .int64(let v): String(v)
        case .uint64(let v): String(v)
        case .unixFD(let v): String(v)
        case .double(let v): plainText(of: v)
        case .string(let s), .objectPath(let s), .signature(let s): s
        case .variant(let inner):
            formatVariantPayload(inner, variant: value)
        case .array, .bytes, .dictionary, .structure:
            jsonValue(value).serialized()
        }
    }

    /// The value as compact JSON, strings quoted, for `--json` output.
    ///
    /// Non-finite doubles become the strings `"inf"`, `"-inf"` and `"nan"`, which
    /// ``parse(_:as:)`` reads back for `d`.
    public static func json(_ value: DBusValue) -> String {
        jsonValue(value).serialized()
    }

    /// The value as a ``JSONValue``, to embed in a larger JSON document.
    ///
    /// `ay` becomes an array of numbers, a dict an object with its keys in ``format(_:)`` text,
    /// a struct an array, and a variant its payload.
    public static func jsonValue(_ value: DBusValue) -> JSONValue {
        switch value {
        case .byte(let v): .number(v)
        case .boolean(let v): .bool(v)
        case .int16(let v): .number(v)
        case .uint16(let v): .number(v)
        case .int32(let v): .number(v)
        case .uint32(let v): .number(v)
        case .int64(let v): .number(v)
        case .uint64(let v): .number(v)
        case .unixFD(let v): .number(v)
        case .double(let v): v.isFinite ? .double(v) : .string(plainText(of: v))
        case .string(let s), .objectPath(let s), .signature(let s): .string(s)
        case .variant(let inner): jsonValue(inner)
        case .array(_, let items): .array(items.map(jsonValue))
        case .bytes(let bytes): .array(bytes.map { .number($0) })
        case .dictionary(_, _, let entries):
            .object(entries.map { JSONValue.Member(format($0.key), jsonValue($0.value)) })
        case .structure(let fields): .array(fields.map(jsonValue))
        }
    }

    // MARK: Private

    private static func formatVariantPayload(_ inner: DBusValue, variant: DBusValue) -> String {
        let plain = format(inner)
        if let reread = try? parse(plain, as: .variant), reread == variant { return plain }
        return json(inner)
    }

    private static func plainText(of value: Double) -> String {
        if value.isNaN { return "nan" }
        if value.isInfinite { return value < 0 ? "-inf" : "inf" }
        return value.description
    }

    private static func value(from json: JSONValue, as type: DBusType, at path: ValuePath) throws(ValueTextError) -> DBusValue {
        switch type {
        case .string, .objectPath, .signature:
            guard case .string(let s) = json else { throw mismatch("a JSON string for type '\(type.signature)'", json, path) }
            return try scalar(s, as: type, at: path)
        case .boolean:
            switch json {
            case .bool(let b): return .boolean(b)
            case .integer(0): return .boolean(false)
            case .integer(1): return .boolean(true)
            case .string(let s): return try scalar(s, as: type, at: path)
            default: throw mismatch("a boolean (true/false) for type 'b'", json, path)
            }
        case .double:
            switch json {
            case .string(let s): return try scalar(s, as: type, at: path)
            default:
                guard let number = json.doubleValue else { throw mismatch("a number for type 'd'", json, path) }
                return .double(number)
            }
        case .byte, .int16, .uint16, .int32, .uint32, .int64, .uint64, .unixFD:
            if case .string(let s) = json { return try scalar(s, as: type, at: path) }
            guard let literal = IntegerLiteral(json) else { throw mismatch("an integer for type '\(type.signature)'", json, path) }
            return try located(path) { () throws(ValueTextError) in try integerValue(literal, as: type) }
        case .variant:
            return .variant(try inferredValue(from: json, at: path))
        case .array(.byte):
            switch json {
            case .string(let s): return .bytes(Array(s.utf8))
            case .array(let items):
                var bytes: [UInt8] = []
                bytes.reserveCapacity(items.count)
                for (position, item) in items.enumerated() {
                    guard case .byte(let b) = try value(from: item, as: .byte, at: path.index(position)) else {
                        preconditionFailure("a 'y' conversion returned another type")
                    }
                    bytes.append(b)
                }
                return .bytes(bytes)
            default:
                throw mismatch(expectation(for: type), json, path)
            }
        case .array(let element):
            guard case .array(let items) = json else { throw mismatch(expectation(for: type), json, path) }
            var values: [DBusValue] = []
            values.reserveCapacity(items.count)
            for (position, item) in items.enumerated() {
                values.append(try value(from: item, as: element, at: path.index(position)))
            }
            return .array(element: element, values)
        case .dictionary(let keyType, let valueType):
            guard case .object(let members) = json else { throw mismatch(expectation(for: type), json, path) }
            var entries: [DictionaryEntry] = []
            entries.reserveCapacity(members.count)
            for member in members {
                let memberPath = path.member(member.key)
                let key = try located(memberPath) { () throws(ValueTextError) in
                    do throws(ValueTextError) {
                        return try parseScalar(member.key, as: keyType)
                    } catch {
                        throw ValueTextError("dict key: " + error.message, withoutValue: "dict key: " + error.withoutValue)
                    }
                }
                entries.append(DictionaryEntry(key, try value(from: member.value, as: valueType, at: memberPath)))
            }
            return .dictionary(key: keyType, value: valueType, entries)
        case .structure(let fieldTypes):
            guard case .array(let items) = json, items.count == fieldTypes.count else {
                throw mismatch(expectation(for: type), json, path)
            }
            var fields: [DBusValue] = []
            fields.reserveCapacity(items.count)
            for (position, (item, fieldType)) in zip(items, fieldTypes).enumerated() {
                fields.append(try value(from: item, as: fieldType, at: path.index(position)))
            }
            return .structure(fields)
        }
    }

    private static func inferredValue(from json: JSONValue, at path: ValuePath) throws(ValueTextError) -> DBusValue {
        switch json {
        case .null:
            throw ValueTextError(located("cannot infer a variant's type from JSON null", path.shown),
                                 withoutValue: located("cannot infer a variant's type from JSON null", path.withoutValue))
        case .bool(let b): return .boolean(b)
        case .integer(let i): return .int64(i)
        case .unsignedInteger(let u): return .uint64(u)
        case .double(let d): return .double(d)
        case .string(let s): return try scalar(s, as: .string, at: path)
        case .array(let items):
            if items.allSatisfy({ $0.stringValue != nil }) {
                return try value(from: json, as: .array(.string), at: path)
            }
            return try value(from: json, as: .array(.variant), at: path)
        case .object:
            return try value(from: json, as: .dictionary(key: .string, value: .variant), at: path)
        }
    }

    private static func scalar(_ text: String, as type: DBusType, at path: ValuePath) throws(ValueTextError) -> DBusValue {
        try located(path) { () throws(ValueTextError) in try parseScalar(text, as: type) }
    }

    private static func located<T>(_ path: ValuePath, _ body: () throws(ValueTextError) -> T) throws(ValueTextError) -> T {
        do {
            return try body()
        } catch {
            throw ValueTextError(located(error.message, path.shown), withoutValue: located(error.withoutValue, path.withoutValue))
        }
    }

    private static func located(_ message: String, _ path: String) -> String {
        path.isEmpty ? message : "\(message) (at \(path))"
    }

    private static func mismatch(_ expected: String, _ json: JSONValue, _ path: ValuePath) -> ValueTextError {
        ValueTextError(located("expected \(expected), got \(abbreviated(json.serialized()))", path.shown),
                       withoutValue: located("expected \(expected)", path.withoutValue))
    }

    /// "expected …, got '…'", and without the text, "expected …".
    private static func refused(_ expected: String, _ text: String) -> ValueTextError {
        ValueTextError("expected \(expected), got \(quoted(text))", withoutValue: "expected \(expected)")
    }

    private static func expectation(for type: DBusType) -> String {
        switch type {
        case .array(.byte): "a JSON array of numbers or a JSON string for type 'ay'"
        case .array: "a JSON array for type '\(type.signature)'"
        case .dictionary: "a JSON object for type '\(type.signature)'"
        case .structure(let fields):
            "a JSON array of \(fields.count) field\(fields.count == 1 ? "" : "s") for struct '\(type.signature)'"
        default: "a value of type '\(type.signature)'"
        }
    }

    private static func quoted(_ text: String) -> String {
        "'" + abbreviated(text) + "'"
    }

    private static func abbreviated(_ text: String) -> String {
        text.count > 60 ? String(text.prefix(57)) + "…" : text
    }

    private static func integer<T: FixedWidthInteger>(_ text: String, as type: DBusType) throws(ValueTextError) -> T {
        guard let literal = IntegerLiteral(text) else {
            throw refused("an integer for type '\(type.signature)'", text)
        }
        return try literal.converted(for: type)
    }

    private static func integerValue(_ literal: IntegerLiteral, as type: DBusType) throws(ValueTextError) -> DBusValue {
        switch type {
        case .byte: .byte(try literal.converted(for: type))
        case .int16: .int16(try literal.converted(for: type))
        case .uint16: .uint16(try literal.converted(for: type))
        case .int32: .int32(try literal.converted(for: type))
        case .uint32: .uint32(try literal.converted(for: type))
        case .int64: .int64(try literal.converted(for: type))
        case .uint64: .uint64(try literal.converted(for: type))
        case .unixFD: .unixFD(try literal.converted(for: type))
        default: throw ValueTextError("type '\(type.signature)' is not an integer type")
        }
    }

    private static func double(_ text: String) throws(ValueTextError) -> Double {
        let trimmed = text.trimmingWhitespace
        switch trimmed.lowercased() {
        case "inf", "+inf", "infinity", "+infinity": return .infinity
        case "-inf", "-infinity": return -.infinity
        case "nan", "+nan", "-nan": return .nan
        default: break
        }
        // Swift's Double(_:) also takes "nan(0x1)" and friends; only the spellings above are wanted.
        guard !trimmed.lowercased().contains("n"), let value = Double(trimmed) else {
            throw refused("a number for type 'd'", text)
        }
        guard value.isFinite else { throw ValueTextError("value \(trimmed) out of range for type 'd'", withoutValue: "out of range for type 'd'") }
        return value
    }
}

/// Where inside a container a value is, as messages show it: `[2]["name"]`, and without the
/// dict keys, which are part of the value (`[2][…]`).
private struct ValuePath {
    var shown = ""
    var withoutValue = ""

    func index(_ position: Int) -> ValuePath {
        ValuePath(shown: shown + "[\(position)]", withoutValue: withoutValue + "[\(position)]")
    }

    func member(_ key: String) -> ValuePath {
        ValuePath(shown: shown + "[\(JSONValue.string(key).serialized())]", withoutValue: withoutValue + "[…]")
    }
}

/// An integer as sign and magnitude, before it is range-checked against a D-Bus type.
private struct IntegerLiteral {
    var isNegative: Bool
    /// `nil` when the magnitude does not fit 64 bits.
    var magnitude: UInt64?
    /// The text as written, for messages.
    var text: String

    /// Reads decimal or `0x` hex with an optional sign.
    init?(_ text: String) {
        var digits = Substring(text.trimmingWhitespace)
        self.text = String(digits)
        isNegative = digits.first == "-"
        if digits.first == "-" || digits.first == "+" { digits = digits.dropFirst() }
        var radix = 10
        if digits.hasPrefix("0x") || digits.hasPrefix("0X") {
            radix = 16
            digits = digits.dropFirst(2)
        }
        guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && ($0.hexDigitValue ?? radix) < radix }) else { return nil }
        magnitude = UInt64(digits, radix: radix)
    }

    /// Takes a JSON number, provided it is integral.
    init?(_ json: JSONValue) {
        switch json {
        case .integer(let i):
            (isNegative, magnitude, text) = (i < 0, i.magnitude, String(i))
        case .unsignedInteger(let u):
            (isNegative, magnitude, text) = (false, u, String(u))
        case .double(let d):
            // Bit-level checks only: rounding functions would need libm, which PropBus does not link.
            guard d.isFinite, d == 0 || d.significandWidth <= Int(d.exponent) else { return nil }
            (isNegative, magnitude, text) = (d < 0, d.magnitude < 0x1p64 ? UInt64(d.magnitude) : nil, d.description)
        default:
            return nil
        }
    }

    /// The value as `T`, or an error naming `type`'s range.
    func converted<T: FixedWidthInteger>(for type: DBusType) throws(ValueTextError) -> T {
        if let magnitude {
            if !isNegative, let value = T(exactly: magnitude) { return value }
            if isNegative, magnitude == 0 { return 0 }
            if isNegative, T.isSigned, magnitude <= UInt64(T.min.magnitude) {
                // Two's complement of the magnitude; reaches T.min, which negation of a T cannot.
                return T(truncatingIfNeeded: 0 &- magnitude)
            }
        }
        let range = "out of range for type '\(type.signature)' (\(T.min)…\(T.max))"
        throw ValueTextError("value \(text) " + range, withoutValue: range)
    }
}

extension String {
    fileprivate var trimmingWhitespace: String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }),
              let last = scalars.lastIndex(where: { !$0.properties.isWhitespace })
        else { return "" }
        return String(scalars[first ... last])
    }
}
