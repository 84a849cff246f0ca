/// What `.gschema.xml` files declare, as `glib-compile-schemas` reads them: schemas with their
/// path and keys (type, or enum or flags; default; summary and description; range; choices),
/// the enums and flags they name, and schemas that extend others.
public struct GSchemaSet: Sendable {
    /// One key of a schema.
    public struct Key: Sendable {
        public var name: String
        public var type: GVariantType
        /// The default, read as the key's type.
        public var defaultValue: GVariantValue
        public var summary: String?
        public var description: String?
        /// `<range min max>`, read as the key's type.
        public var range: (minimum: GVariantValue, maximum: GVariantValue)?
        /// The values allowed: `<choices>`, or an enum's nicks.
        public var choices: [String]?
        /// Where it was declared, for messages: `FILE:LINE`.
        public var location: String
    }

    /// One schema.
    public struct Schema: Sendable {
        public var id: String
        /// Its path (`/org/gnome/desktop/interface/`); nil for a relocatable schema.
        public var path: String?
        public var keys: [Key]
        public var location: String
    }

    public private(set) var schemas: [Schema] = []
    private var enums: [String: [String]] = [:]
    private var pending: [(element: XMLElement, source: String)] = []

    public init() {}

    /// Adds the schemas of one file's text; `source` names it in errors. Schemas extending one
    /// of a later file are resolved by ``resolve()``.
    public mutating func add(_ text: String, source: String) throws(GVariantError) {
        let root = try XMLElement.parse(text, source: source)
        guard root.name == "schemalist" else { throw GVariantError("\(source):\(root.line): the root element is <\(root.name)>, not <schemalist>") }
        for element in root.children where element.name == "enum" || element.name == "flags" {
            guard let id = element.attributes["id"] else { throw GVariantError("\(source):\(element.line): <\(element.name)> without an id") }
            enums[id] = element.children(named: "value").compactMap { $0.attributes["nick"] }
        }
        pending += root.children(named: "schema").map { ($0, source) }
    }

    /// Reads the schemas added, bases before the schemas that extend them.
    public mutating func resolve() throws(GVariantError) {
        var progress = true
        while !pending.isEmpty && progress {
            progress = false
            for (index, item) in pending.enumerated().reversed() {
                if let base = item.element.attributes["extends"], !schemas.contains(where: { $0.id == base }) { continue }
                schemas.append(try schema(item.element, source: item.source))
                pending.remove(at: index)
                progress = true
            }
        }
        if let unresolved = pending.first {
            throw GVariantError("\(unresolved.source):\(unresolved.element.line): schema \(unresolved.element.attributes["id"] ?? "?") extends \(unresolved.element.attributes["extends"] ?? "?"), which no file declares")
        }
        schemas.sort { $0.id < $1.id }
    }

    private func schema(_ element: XMLElement, source: String) throws(GVariantError) -> Schema {
        let location = "\(source):\(element.line)"
        guard let id = element.attributes["id"] else { throw GVariantError("\(location): <schema> without an id") }
        var keys: [Key] = []
        if let base = element.attributes["extends"], let baseSchema = schemas.first(where: { $0.id == base }) {
            keys = baseSchema.keys
            for override in element.children(named: "override") {
                guard let name = override.attributes["name"], let index = keys.firstIndex(where: { $0.name == name }) else {
                    throw GVariantError("\(source):\(override.line): <override> of a key \(base) does not have")
                }
                keys[index].defaultValue = try read(override.text, as: keys[index].type, at: "\(source):\(override.line)")
            }
        }
        for keyElement in element.children(named: "key") {
            keys.append(try key(keyElement, source: source))
        }
        var path = element.attributes["path"]
        if let given = path, !(given.hasPrefix("/") && given.hasSuffix("/")) { throw GVariantError("\(location): path \(given) must start and end with '/'") }
        if path?.isEmpty == true { path = nil }
        return Schema(id: id, path: path, keys: keys, location: location)
    }

    private func key(_ element: XMLElement, source: String) throws(GVariantError) -> Key {
        let location = "\(source):\(element.line)"
        guard let name = element.attributes["name"] else { throw GVariantError("\(location): <key> without a name") }
        var choices: [String]?
        let type: GVariantType
        if let typeText = element.attributes["type"] {
            do { type = try GVariantType(parsing: typeText) } catch { throw GVariantError("\(location): key \(name): \(error.message)") }
        } else if let enumID = element.attributes["enum"] {
            guard let nicks = enums[enumID] else { throw GVariantError("\(location): key \(name): no enum \(enumID)") }
            type = .string
            choices = nicks
        } else if let flagsID = element.attributes["flags"] {
            guard enums[flagsID] != nil else { throw GVariantError("\(location): key \(name): no flags \(flagsID)") }
            type = .array(.string)
        } else {
            throw GVariantError("\(location): key \(name) has no type, enum or flags")
        }
        guard let defaultElement = element.child(named: "default") else { throw GVariantError("\(location): key \(name) has no <default>") }
        var key = Key(name: name, type: type, defaultValue: try read(defaultElement.text, as: type, at: location),
                      summary: element.child(named: "summary").map { Self.collapse($0.text) },
                      description: element.child(named: "description").map { Self.collapse($0.text) },
                      range: nil, choices: choices, location: location)
        if let range = element.child(named: "range") {
            key.range = (try read(range.attributes["min"] ?? "", as: type, at: location), try read(range.attributes["max"] ?? "", as: type, at: location))
        }
        if let listed = element.child(named: "choices") {
            key.choices = listed.children(named: "choice").compactMap { $0.attributes["value"] }
        }
        return key
    }

    private func read(_ text: String, as type: GVariantType, at location: String) throws(GVariantError) -> GVariantValue {
        do { return try GVariantText.parse(text, as: type) } catch { throw GVariantError("\(location): \(error.message)") }
    }

    /// A summary or description as one line: schema files wrap them.
    private static func collapse(_ text: String) -> String {
        text.split(whereSeparator: { $0 == " " || $0 == "\n" || $0 == "\t" || $0 == "\r" }).joined(separator: " ")
    }

    /// The override files' values (`[SCHEMA]` groups of `key=value`, read as the key's type),
    /// by schema id and key; later files win, as in `glib-compile-schemas`. Per-desktop groups
    /// (`[SCHEMA:DESKTOP]`) are left out and named in `skipped`.
    public func overrides(_ files: [(text: String, source: String)], skipped: inout [String]) throws(GVariantError) -> [String: [String: GVariantValue]] {
        var result: [String: [String: GVariantValue]] = [:]
        for file in files {
            let keyFile = try KeyFile(parsing: file.text, source: file.source)
            for group in keyFile.groups {
                if group.name.contains(":") {
                    skipped.append("\(file.source): [\(group.name)]: per-desktop overrides are not imported")
                    continue
                }
                guard let schema = schemas.first(where: { $0.id == group.name }) else {
                    throw GVariantError("\(file.source): [\(group.name)]: no such schema")
                }
                for entry in group.entries {
                    guard let key = schema.keys.first(where: { $0.name == entry.key }) else {
                        throw GVariantError("\(file.source): [\(group.name)]: schema has no key \(entry.key)")
                    }
                    result[schema.id, default: [:]][key.name] = try read(entry.value, as: key.type, at: "\(file.source): [\(group.name)] \(entry.key)")
                }
            }
        }
        return result
    }
}
