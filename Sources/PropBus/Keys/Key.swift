import DBusValues

/// A property key, `group.name`, validated against ``rule``: group segments of `[A-Za-z0-9_]+`
/// joined by `.`, a name of `[A-Za-z_][A-Za-z0-9_]*`, at most 255 bytes; a refusal quotes the
/// offending character whole.
///
/// The group maps to an object path below the root (`ui.switch` →
/// `/org/propbus/PropBus1/ui/switch`) and the name is a D-Bus property of that object.
public struct Key: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The rule quoted in every `InvalidKey` error.
    public static let rule = "a key is group.name: group segments match [A-Za-z0-9_]+ joined by '.', the name matches [A-Za-z_][A-Za-z0-9_]*, at most 255 bytes in all"
    /// The maximum key length, in bytes.
    public static let maximumLength = 255
    /// The object path of the root object; groups live below it.
    public static let rootPath = PropBusAPI.rootPath

    /// The full key text.
    public let text: String
    /// The group part, e.g. `ui.switch`.
    public let group: String
    /// The name part, e.g. `on`.
    public let name: String

    public var description: String { text }

    /// Parses and validates `text`.
    public init(_ text: String) throws(PropBusError) {
        // One pass over the bytes for the valid case (a store's every key at start-up); the
        // checks below only run to say what is wrong.
        if let lastDot = Self.validLastDot(text) {
            let split = text.utf8.index(text.utf8.startIndex, offsetBy: lastDot)
            self.text = text
            self.group = String(text[..<split])
            self.name = String(text[text.utf8.index(after: split)...])
            return
        }
        func fail(_ detail: String) -> PropBusError {
            PropBusError(.invalidKey, "invalid key '\(text)': \(detail); \(Key.rule)")
        }
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty else { throw fail("it is empty") }
        guard bytes.count <= Self.maximumLength else { throw fail("it is \(bytes.count) bytes long") }
        guard let lastDot = bytes.lastIndex(of: UInt8(ascii: ".")) else {
            throw fail("it has no group (no '.')")
        }
        for (index, scalar) in text.unicodeScalars.enumerated()
        where scalar != "." && !(scalar.isASCII && ObjectPath.isElementByte(UInt8(scalar.value))) {
            throw fail("character '\(scalar)' at position \(index + 1) is not allowed")
        }
        let groupBytes = bytes[..<lastDot]
        let nameBytes = bytes[(lastDot + 1)...]
        guard let first = nameBytes.first else { throw fail("the name after the last '.' is empty") }
        guard !(first >= 0x30 && first <= 0x39) else { throw fail("the name must not start with a digit") }
        for segment in groupBytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false) where segment.isEmpty {
            throw fail("it has an empty group segment")
        }
        self.text = text
        self.group = String(decoding: groupBytes, as: UTF8.self)
        self.name = String(decoding: nameBytes, as: UTF8.self)
    }

    /// The offset of the last '.' of a valid key, or `nil` when `text` is not one.
    private static func validLastDot(_ text: String) -> Int? {
        var count = 0
        var lastDot = -1
        var previousWasDot = true  // a leading '.' is an empty segment
        for byte in text.utf8 {
            if byte == UInt8(ascii: ".") {
                if previousWasDot { return nil }
                previousWasDot = true
                lastDot = count
            } else {
                guard ObjectPath.isElementByte(byte) else { return nil }
                previousWasDot = false
            }
            count += 1
        }
        guard count <= maximumLength, lastDot >= 0, !previousWasDot else { return nil }
        // The name must not start with a digit.
        let first = text.utf8[text.utf8.index(text.utf8.startIndex, offsetBy: lastDot + 1)]
        guard !(first >= 0x30 && first <= 0x39) else { return nil }
        return lastDot
    }

    /// A key from parts that are already known to be valid, e.g. a registered group and a
    /// name to look up. It skips validation, so use it for lookups only: a bad name simply
    /// finds nothing.
    public init(uncheckedGroup group: String, name: String) {
        self.group = group
        self.name = name
        text = group + "." + name
    }

    // Identity is the text alone; group and name are derived from it.
    public static func == (lhs: Key, rhs: Key) -> Bool { lhs.text == rhs.text }
    public func hash(into hasher: inout Hasher) { hasher.combine(text) }

    /// The object path of this key's group.
    public var objectPath: String { Key.objectPath(ofGroup: group) }

    /// The object path of a group.
    public static func objectPath(ofGroup group: String) -> String {
        rootPath + "/" + String(group.map { $0 == "." ? "/" : $0 })
    }

    /// The group whose object lives at `path`, if `path` is below the root.
    public static func group(atPath path: String) -> String? {
        guard path.hasPrefix(rootPath + "/"), path.count > rootPath.count + 1 else { return nil }
        return String(path.dropFirst(rootPath.count + 1).map { $0 == "/" ? "." : $0 })
    }

    public static func < (lhs: Key, rhs: Key) -> Bool { lhs.text < rhs.text }
}
