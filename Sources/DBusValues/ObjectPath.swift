/// Object-path rules from the D-Bus specification, in pure Swift so that code without libdbus
/// (the core model, tests) can check paths too.
public enum ObjectPath {
    /// Whether `path` is `/` or `/`-separated non-empty elements of `[A-Za-z0-9_]`.
    public static func isValid(_ path: String) -> Bool {
        let bytes = Array(path.utf8)
        guard bytes.first == UInt8(ascii: "/") else { return false }
        if bytes.count == 1 { return true }
        guard bytes.last != UInt8(ascii: "/") else { return false }
        var previousWasSlash = false
        for byte in bytes {
            if byte == UInt8(ascii: "/") {
                if previousWasSlash { return false }
                previousWasSlash = true
            } else {
                guard isElementByte(byte) else { return false }
                previousWasSlash = false
            }
        }
        return true
    }

    /// Whether `byte` may appear in a path element.
    public static func isElementByte(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == 0x5F
    }
}
