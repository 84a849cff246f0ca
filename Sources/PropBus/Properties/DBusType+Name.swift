import DBus

extension DBusType {
    /// The type's name as people read it and as docs/expressions.md and error messages spell
    /// it: `int64` rather than `x`, `array<string>` rather than `as`.
    public var name: String {
        switch self {
        case .byte: "byte"
        case .boolean: "boolean"
        case .int16: "int16"
        case .uint16: "uint16"
        case .int32: "int32"
        case .uint32: "uint32"
        case .int64: "int64"
        case .uint64: "uint64"
        case .double: "double"
        case .string: "string"
        case .objectPath: "object_path"
        case .signature: "signature"
        case .unixFD: "unix_fd"
        case .variant: "variant"
        case .array(let element): "array<\(element.name)>"
        case .dictionary(let key, let value): "dict<\(key.name), \(value.name)>"
        case .structure(let fields): "struct<\(fields.map(\.name).joined(separator: ", "))>"
        }
    }
}
