import DBusValues

extension DBusType {
    /// The natural empty value of the type (`false`, `0`, `""`, `[]`, `{}`, a struct of those),
    /// used as a default when none is given. A variant holds an empty string.
    public var zeroValue: DBusValue {
        switch self {
        case .byte: .byte(0)
        case .boolean: .boolean(false)
        case .int16: .int16(0)
        case .uint16: .uint16(0)
        case .int32: .int32(0)
        case .uint32: .uint32(0)
        case .int64: .int64(0)
        case .uint64: .uint64(0)
        case .double: .double(0)
        case .string: .string("")
        case .objectPath: .objectPath("/")
        case .signature: .signature("")
        case .unixFD: .unixFD(0)
        case .variant: .variant(.string(""))
        case .array(let element): .array(of: element, [])
        case .dictionary(let key, let value): .dictionary(key: key, value: value, [])
        case .structure(let fields): .structure(fields.map(\.zeroValue))
        }
    }
}
