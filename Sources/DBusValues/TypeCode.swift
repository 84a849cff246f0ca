/// The one-byte D-Bus type codes.
///
/// libdbus spells these as `DBUS_TYPE_*` macros of the form `((int) 's')`, which Swift cannot
/// import, so they are restated here.
public enum TypeCode: UInt8, Sendable, CaseIterable {
    case byte = 0x79        // y
    case boolean = 0x62     // b
    case int16 = 0x6E       // n
    case uint16 = 0x71      // q
    case int32 = 0x69       // i
    case uint32 = 0x75      // u
    case int64 = 0x78       // x
    case uint64 = 0x74      // t
    case double = 0x64      // d
    case string = 0x73      // s
    case objectPath = 0x6F  // o
    case signature = 0x67   // g
    case unixFD = 0x68      // h
    case array = 0x61       // a
    case variant = 0x76     // v
    case structBegin = 0x28 // (
    case structEnd = 0x29   // )
    case dictBegin = 0x7B   // {
    case dictEnd = 0x7D     // }
    /// What libdbus's iterators report for a struct (`DBUS_TYPE_STRUCT`); signatures use `(`.
    case structValue = 0x72 // r
    /// What libdbus's iterators report for a dict entry (`DBUS_TYPE_DICT_ENTRY`); signatures use `{`.
    case dictEntryValue = 0x65 // e

    /// The code as libdbus's `int` type argument.
    public var cValue: Int32 { Int32(rawValue) }

    /// The code as its signature character.
    public var character: Character { Character(Unicode.Scalar(rawValue)) }
}
