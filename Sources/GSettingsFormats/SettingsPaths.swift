/// The reversible mapping between GSettings/dconf paths and propbus keys (docs/dconf.md,
/// "Names"), the same rules the GSettings backend module applies (GIOPropBus/names.c):
///
///     /org/gnome/desktop/interface/font-name  <->  org.gnome.desktop.interface.font_name
///
/// A segment of ASCII letters and digits in runs joined by single `-` is written with `_` for
/// `-` (the readable form). Any other segment, and one the readable form would make reserved (a
/// name starting with a digit, a first segment `bindings`, the Values interface's method names),
/// is written escaped: `_`, then letters and digits as they are and every other byte as `_` and
/// two lower-case hex digits (`profiles:` → `_profiles_3a`). Only keys in these canonical forms
/// have a path.
public enum SettingsPaths {
    /// The propbus key of the dconf key `/a/b/c-d` (`a.b.c_d`); nil for a key right below `/`,
    /// an empty segment, or a key longer than propbus allows.
    public static func key(forSettingsKey path: String) -> String? {
        map(path, isKey: true)
    }

    /// The propbus group of the dconf directory `/a/b/` (`a.b`).
    public static func group(forSettingsDirectory path: String) -> String? {
        map(path, isKey: false)
    }

    /// The dconf key a propbus key stands for (`a.b.c_d` → `/a/b/c-d`); nil when a segment is
    /// in neither canonical form.
    public static func settingsKey(forKey key: String) -> String? {
        var segments = key.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count >= 2, let name = segments.popLast() else { return nil }
        var out = "/"
        for (index, segment) in segments.enumerated() {
            guard let decoded = decode(segment, first: index == 0, name: false) else { return nil }
            out += decoded + "/"
        }
        guard let decodedName = decode(name, first: false, name: true) else { return nil }
        return out + decodedName
    }

    /// The longest key propbus takes, in bytes.
    static let maximumKeyLength = 255

    private static func map(_ path: String, isKey: Bool) -> String? {
        guard path.hasPrefix("/") else { return nil }
        var segments = path.dropFirst().split(separator: "/", omittingEmptySubsequences: false)
        if !isKey {
            guard segments.last == "" else { return nil }
            segments.removeLast()
        }
        guard segments.count >= (isKey ? 2 : 1), !segments.contains(where: \.isEmpty) else { return nil }
        let encoded = segments.enumerated().map { index, segment in
            encode(segment, first: index == 0, name: isKey && index == segments.count - 1)
        }.joined(separator: ".")
        return encoded.utf8.count <= maximumKeyLength ? encoded : nil
    }

    private static func isAlnum(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || ((byte | 0x20) >= 0x61 && (byte | 0x20) <= 0x7a)
    }

    private static func isReadable(_ bytes: [UInt8]) -> Bool {
        guard let first = bytes.first, let last = bytes.last, first != UInt8(ascii: "-"), last != UInt8(ascii: "-") else { return false }
        for (index, byte) in bytes.enumerated() {
            if byte == UInt8(ascii: "-") {
                if bytes[index + 1] == UInt8(ascii: "-") { return false }
            } else if !isAlnum(byte) {
                return false
            }
        }
        return true
    }

    private static let methodNames: Set<String> = ["Reset", "GetWithRevision", "CompareAndSet"]

    private static func isReserved(_ text: String, first: Bool, name: Bool) -> Bool {
        if name { return text.first?.isNumber == true || methodNames.contains(text) }
        return first && text == "bindings"
    }

    static func encode<S: StringProtocol>(_ segment: S, first: Bool, name: Bool) -> String {
        let bytes = Array(segment.utf8)
        if isReadable(bytes), !isReserved(String(segment), first: first, name: name) {
            return segment.split(separator: "-", omittingEmptySubsequences: false).joined(separator: "_")
        }
        var out = "_"
        for byte in bytes {
            if isAlnum(byte) {
                out.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                out += "_" + String(byte, radix: 16).leftPadded(to: 2)
            }
        }
        return out
    }

    private static func decode(_ segment: Substring, first: Bool, name: Bool) -> String? {
        let bytes = Array(segment.utf8)
        guard !bytes.isEmpty else { return nil }
        var out: [UInt8] = []
        if bytes[0] != UInt8(ascii: "_") {
            for byte in bytes {
                if byte == UInt8(ascii: "_") { out.append(UInt8(ascii: "-")) } else if isAlnum(byte) { out.append(byte) } else { return nil }
            }
        } else {
            var index = 1
            while index < bytes.count {
                let byte = bytes[index]
                if isAlnum(byte) {
                    out.append(byte)
                    index += 1
                } else if byte == UInt8(ascii: "_"), index + 2 < bytes.count,
                          let value = UInt8(String(decoding: bytes[(index + 1)...(index + 2)], as: UTF8.self), radix: 16) {
                    out.append(value)
                    index += 3
                } else {
                    return nil
                }
            }
        }
        guard !out.contains(UInt8(ascii: "/")), !out.contains(0), let text = String(validating: out, as: UTF8.self) else { return nil }
        // Canonical only: encoding the result must give the segment back.
        return encode(text, first: first, name: name) == segment ? text : nil
    }
}

