/// Name, path and text checks of the D-Bus specification ("Valid names", "Valid signatures"),
/// surfaced as thrown ``DBusError``s.
///
/// Pure Swift, so the value model and its users need no libdbus; `ValidationTests` checks each
/// rule against libdbus's own `dbus_validate_*` answers. Run these on anything that comes from
/// outside before handing it to a libdbus constructor, which would otherwise abort the process.
/// A name holding a NUL byte is invalid here, where the C call would have seen it cut short.
public enum Validation {
    /// The longest interface, member, error or bus name (bytes).
    public static let maximumNameLength = 255

    /// `dbus_validate_path`.
    public static func check(path: String) throws(DBusError) {
        guard ObjectPath.isValid(path) else { throw .invalidArgs("invalid object path '\(path)'") }
    }

    /// `dbus_validate_interface`.
    public static func check(interface: String) throws(DBusError) {
        guard isValidInterfaceName(interface) else { throw .invalidArgs("invalid interface name '\(interface)'") }
    }

    /// `dbus_validate_member`.
    public static func check(member: String) throws(DBusError) {
        guard isValidMemberName(member) else { throw .invalidArgs("invalid member name '\(member)'") }
    }

    /// `dbus_validate_bus_name`.
    public static func check(busName: String) throws(DBusError) {
        guard isValidBusName(busName) else { throw .invalidArgs("invalid bus name '\(busName)'") }
    }

    /// `dbus_validate_error_name`: the same rules as an interface name.
    public static func isValidErrorName(_ name: String) -> Bool {
        isValidInterfaceName(name)
    }

    /// Two or more `.`-separated elements of `[A-Za-z_][A-Za-z0-9_]*`, at most 255 bytes.
    public static func isValidInterfaceName(_ name: String) -> Bool {
        let bytes = name.utf8
        guard !bytes.isEmpty, bytes.count <= maximumNameLength else { return false }
        var elements = 1
        var atElementStart = true
        for byte in bytes {
            if byte == UInt8(ascii: ".") {
                guard !atElementStart else { return false }
                elements += 1
                atElementStart = true
            } else if atElementStart {
                guard isInitialNameByte(byte) else { return false }
                atElementStart = false
            } else {
                guard isNameByte(byte) else { return false }
            }
        }
        return !atElementStart && elements >= 2
    }

    /// One element of `[A-Za-z_][A-Za-z0-9_]*`, at most 255 bytes.
    public static func isValidMemberName(_ name: String) -> Bool {
        let bytes = name.utf8
        guard let first = bytes.first, bytes.count <= maximumNameLength, isInitialNameByte(first) else { return false }
        return bytes.dropFirst().allSatisfy(isNameByte)
    }

    /// A well-known name (two or more `.`-separated elements of `[A-Za-z_-][A-Za-z0-9_-]*`) or a
    /// unique name (`:` then `[A-Za-z0-9_-]` with single dots between), at most 255 bytes.
    ///
    /// Unique names are taken as libdbus takes them, laxer than the specification's wording
    /// (`:` alone and `:.1` pass): the bus assigns them, and refusing one it assigned would help
    /// nobody.
    public static func isValidBusName(_ name: String) -> Bool {
        let bytes = name.utf8
        guard let first = bytes.first, bytes.count <= maximumNameLength else { return false }
        if first == UInt8(ascii: ":") {
            var previousWasDot = false
            for byte in bytes.dropFirst() {
                if byte == UInt8(ascii: ".") {
                    guard !previousWasDot else { return false }
                    previousWasDot = true
                } else {
                    guard isBusNameByte(byte) else { return false }
                    previousWasDot = false
                }
            }
            return !previousWasDot
        }
        var elements = 1
        var atElementStart = true
        for byte in bytes {
            if byte == UInt8(ascii: ".") {
                guard !atElementStart else { return false }
                elements += 1
                atElementStart = true
            } else {
                // A well-known name's elements may not start with a digit.
                guard atElementStart ? isInitialBusNameByte(byte) : isBusNameByte(byte) else { return false }
                atElementStart = false
            }
        }
        return !atElementStart && elements >= 2
    }

    /// Whether `bytes` are text a D-Bus string may carry (`dbus_validate_utf8`): well-formed
    /// UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF) without a NUL byte.
    public static func isValidUTF8<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> Bool {
        guard !bytes.contains(0) else { return false }
        var iterator = bytes.makeIterator()
        var decoder = UTF8()
        while true {
            switch decoder.decode(&iterator) {
            case .scalarValue: continue
            case .emptyInput: return true
            case .error: return false
            }
        }
    }

    private static func isInitialNameByte(_ byte: UInt8) -> Bool {
        (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == 0x5F
    }

    private static func isNameByte(_ byte: UInt8) -> Bool {
        isInitialNameByte(byte) || (byte >= 0x30 && byte <= 0x39)
    }

    private static func isInitialBusNameByte(_ byte: UInt8) -> Bool {
        isInitialNameByte(byte) || byte == UInt8(ascii: "-")
    }

    private static func isBusNameByte(_ byte: UInt8) -> Bool {
        isNameByte(byte) || byte == UInt8(ascii: "-")
    }
}
