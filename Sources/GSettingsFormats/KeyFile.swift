/// The key file format of `dconf dump`/`dconf load`, dconf's `/etc/dconf/db/NAME.d/` files and
/// `.gschema.override` files, as GLib's `GKeyFile` reads it: `[group]` lines, `key=value` lines
/// (the value raw, as `g_key_file_get_value` returns it), `#` comments and blank lines. A group
/// that appears twice is one group; a key set twice keeps its last value, in its first place.
public struct KeyFile: Sendable {
    /// One group and its entries, in file order.
    public struct Group: Sendable {
        public var name: String
        public var entries: [(key: String, value: String)]
    }

    public private(set) var groups: [Group] = []

    public init() {}

    /// Reads `text`; `source` names it in errors (`FILE:LINE: …`).
    public init(parsing text: String, source: String) throws(GVariantError) {
        var current: Int?
        for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = rawLine.drop { $0 == " " || $0 == "\t" || $0 == "\r" }
            if line.isEmpty || line.hasPrefix("#") { continue }
            if line.hasPrefix("[") {
                let trimmed = String(line.reversed().drop { $0 == " " || $0 == "\t" || $0 == "\r" }.reversed())
                guard trimmed.hasSuffix("]") else { throw GVariantError("\(source):\(index + 1): a group line must end with ']'") }
                let name = String(trimmed.dropFirst().dropLast())
                guard !name.isEmpty, !name.contains("["), !name.contains("]") else {
                    throw GVariantError("\(source):\(index + 1): invalid group name")
                }
                current = groupIndex(named: name)
                continue
            }
            guard let equals = line.firstIndex(of: "=") else {
                throw GVariantError("\(source):\(index + 1): expected [group], key=value or a # comment")
            }
            guard let group = current else { throw GVariantError("\(source):\(index + 1): a key before the first [group]") }
            let key = String(line[..<equals].reversed().drop { $0 == " " || $0 == "\t" }.reversed())
            let value = String(line[line.index(after: equals)...].drop { $0 == " " || $0 == "\t" })
            guard !key.isEmpty else { throw GVariantError("\(source):\(index + 1): an empty key") }
            set(value.hasSuffix("\r") ? String(value.dropLast()) : value, for: key, in: group)
        }
    }

    private mutating func set(_ value: String, for key: String, in group: Int) {
        if let entry = groups[group].entries.firstIndex(where: { $0.key == key }) {
            groups[group].entries[entry].value = value
        } else {
            groups[group].entries.append((key, value))
        }
    }

    private mutating func groupIndex(named name: String) -> Int {
        if let index = groups.firstIndex(where: { $0.name == name }) { return index }
        groups.append(Group(name: name, entries: []))
        return groups.count - 1
    }

    /// Sets `key` of `group`, adding either at the end when new.
    public mutating func set(_ value: String, for key: String, in group: String) {
        set(value, for: key, in: groupIndex(named: group))
    }

    /// The file's text, as `g_key_file_to_data` writes it: groups separated by a blank line.
    public var text: String {
        groups.map { group in
            "[\(group.name)]\n" + group.entries.map { "\($0.key)=\($0.value)\n" }.joined()
        }.joined(separator: "\n")
    }
}
