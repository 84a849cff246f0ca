import DBusValues
import Glibc
import PropBus
import SystemKit

/// A JSON declaration of groups with their properties, commands and bindings, like a GSettings
/// schema. The format is documented in `docs/model-files.md`.
///
/// Declarations are applied at every start: properties are registered again (keeping their
/// stored values), bindings are made again. Every error names the file, the key and the problem.
public struct ModelFile: Sendable {
    /// A property to register.
    public struct PropertyDeclaration: Sendable {
        public var key: Key
        public var type: DBusType
        public var defaultValue: DBusValue
        /// `CreateProperty` options.
        public var options: [String: DBusValue]
    }

    /// A command (docs/commands.md), created with `CreateCommand` options.
    public struct CommandDeclaration: Sendable {
        public var key: Key
        /// `CreateCommand` options.
        public var options: [String: DBusValue]
    }

    /// A binding to make (`Manager.Bind`).
    public struct BindingDeclaration: Sendable {
        public var key: String
        public var to: String
        /// `Bind` options.
        public var options: [String: DBusValue]
    }

    /// The file the declarations came from.
    public let path: String
    /// The file's text, to point errors at a line and column.
    private let text: String
    public private(set) var properties: [PropertyDeclaration] = []
    public private(set) var commands: [CommandDeclaration] = []
    public private(set) var bindings: [BindingDeclaration] = []
    /// Types already parsed, by their text: a file's keys mostly share a few.
    private var parsedTypes: [String: DBusType] = [:]
    /// The problems found, one per declaration (`FILE:LINE:COLUMN: KEY: PROBLEM`): the file is
    /// read to its end, so one reload reports every mistake, not only the first. Empty unless
    /// read with `keepingProblems`: otherwise the first problem found throws them all.
    public private(set) var problems: [String] = []

    /// The largest model file read by default (`propbusd --max-model-file-size`): parsing
    /// and checking need about five times the file's size at their peak.
    public static let defaultMaximumSize = 8 << 20

    /// Reads and checks the file at `path`: a regular file (symlinks followed) of at most
    /// `maximumSize` bytes; anything else is refused unread.
    ///
    /// With `keepingProblems`, a file whose declarations have problems is returned with them in
    /// ``problems`` (and the declarations that had none), so that a load can add the problems
    /// only the model can see (``typeChanges(in:)``); a file that is not JSON still throws.
    public init(contentsOf path: String, maximumSize: Int = Self.defaultMaximumSize, keepingProblems: Bool = false) throws(PropBusError) {
        let bytes: [UInt8]
        do {
            bytes = try FileSystem.regularFileContents(of: path, maximumSize: maximumSize)
        } catch {
            if case .tooLarge = error {
                throw PropBusError(.limitsExceeded, "\(path): cannot read the model file: \(error); the limit is \(maximumSize) bytes (propbusd --max-model-file-size)")
            }
            throw PropBusError(.invalidArgs, "\(path): cannot read the model file: \(error)")
        }
        // Strict, as String(contentsOfFile:encoding: .utf8) was: a file that is not UTF-8 is refused.
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw PropBusError(.invalidArgs, "\(path): cannot read the model file: it is not UTF-8 text")
        }
        try self.init(path: path, text: text, keepingProblems: keepingProblems)
    }

    /// Checks `text` as the content of a model file named `path` (`keepingProblems`: as
    /// ``init(contentsOf:maximumSize:keepingProblems:)`` says).
    public init(path: String, text: String, keepingProblems: Bool = false) throws(PropBusError) {
        self.path = path
        self.text = text
        let json: JSONValue
        do { json = try JSONValue.parse(text) } catch {
            let (line, column) = Self.lineAndColumn(ofByte: error.offset, in: text)
            throw PropBusError(.invalidArgs, "\(path):\(line):\(column): invalid JSON: \(error.reason)")
        }
        // Before any field is read: a NUL cut the string short where C reads it (an exec
        // argument, a writers entry matched as a user name) and made every reply carrying it
        // unsendable, for everyone.
        if let path = Self.pathOfStringWithNUL(in: json) {
            let (line, column) = Self.lineAndColumnOfNULEscape(in: text)
            throw PropBusError(.invalidArgs, "\(path.isEmpty ? self.path : self.path + ":\(line):\(column)"): \(path): a string holds a NUL character (\\u0000), which D-Bus strings cannot carry; write an 'ay' value with a NUL as an array of numbers")
        }
        guard let top = json.objectMembers else { throw fail(nil, "the document must be a JSON object with \"groups\" (and optionally \"bindings\")") }
        for member in top {
            switch member.key {
            case "groups":
                guard let groups = member.value.objectMembers else { throw fail(nil, "\"groups\" must be an object of group names") }
                for group in groups { collect { (file: inout ModelFile) throws(PropBusError) in try file.readGroup(group.key, group.value) } }
            case "bindings":
                guard let items = member.value.arrayValue else { throw fail(nil, "\"bindings\" must be an array") }
                for (index, item) in items.enumerated() {
                    collect { (file: inout ModelFile) throws(PropBusError) in try file.readBinding(index, item) }
                }
            case "version", "description":
                continue
            default:
                problems.append(fail(nil, "unknown field \"\(member.key)\"; expected \"groups\", \"bindings\", \"description\" or \"version\"").message)
            }
        }
        if !problems.isEmpty, !keepingProblems { throw PropBusError(.invalidArgs, problems.joined(separator: "\n")) }
    }

    /// The declarations that would change the type of a key `model` holds, each as a problem
    /// naming the file, line and column, the key, both types and how to migrate: every one, also
    /// beside the problems of ``problems``, so that one reload reports them all.
    public func typeChanges(in model: PropertyModel) -> [String] {
        properties.compactMap { property in
            guard let existing = model.definition(for: property.key), existing.type != property.type else { return nil }
            return typeChangeProblem(property.key.text, "property \(property.key) already exists with type '\(existing.type.signature)'; cannot register it as '\(property.type.signature)'").message
        }
    }

    /// A type change's problem, with how to migrate.
    private func typeChangeProblem(_ key: String, _ message: String) -> PropBusError {
        fail(key, message + "; to migrate, declare the new type under a new name (and copy the value with propctl get/set), or delete the key with propctl delete \(key) (which drops its stored value) and reload")
    }

    /// Runs one declaration's check, keeping its problem and going on with the next.
    private mutating func collect(_ check: (inout ModelFile) throws(PropBusError) -> Void) {
        do { try check(&self) } catch { problems.append(error.message) }
    }

    /// An error as compilers write them: `FILE:LINE:COLUMN: KEY: PROBLEM`, pointing at the
    /// declaration of `key` (its last name, as written in the file) or at the start.
    private func fail(_ key: String?, _ problem: String) -> PropBusError {
        let (line, column) = key.map { Self.lineAndColumn(ofDeclaration: $0, in: text) } ?? (1, 1)
        return PropBusError(.invalidArgs, "\(path):\(line):\(column): " + (key.map { "\($0): " } ?? "") + problem)
    }

    /// Where `"name":` of a key (its last segment; `bindings` for a binding) first appears.
    static func lineAndColumn(ofDeclaration key: String, in text: String) -> (Int, Int) {
        var name = key.hasPrefix("bindings[") ? "bindings" : String(key.split(separator: ".").last ?? "")
        if let space = name.firstIndex(of: " ") { name = String(name[..<space]) }
        let needle = Array("\"\(name)\"".utf8)
        let bytes = Array(text.utf8)
        guard !needle.isEmpty, bytes.count >= needle.count else { return (1, 1) }
        for start in 0...(bytes.count - needle.count) where bytes[start..<start + needle.count].elementsEqual(needle) {
            return lineAndColumn(ofByte: start, in: text)
        }
        return (1, 1)
    }

    /// Where in `json` the first string (or member name) holding a NUL is, as `groups.a.properties.b.description`
    /// (array positions as `[n]`); nil when none does.
    static func pathOfStringWithNUL(in json: JSONValue, at path: String = "") -> String? {
        switch json {
        case .string(let string):
            return string.utf8.contains(0) ? path : nil
        case .array(let items):
            for (position, item) in items.enumerated() {
                if let found = pathOfStringWithNUL(in: item, at: path + "[\(position)]") { return found }
            }
        case .object(let members):
            for member in members {
                let inner = path.isEmpty ? member.key : path + "." + member.key
                if member.key.utf8.contains(0) { return inner }
                if let found = pathOfStringWithNUL(in: member.value, at: inner) { return found }
            }
        case .null, .bool, .integer, .unsignedInteger, .double:
            break
        }
        return nil
    }

    /// Line and column of the first `\u0000` escape (in `\\u0000` the backslash is escaped,
    /// and there is none); (1, 1) when there is none.
    static func lineAndColumnOfNULEscape(in text: String) -> (Int, Int) {
        let bytes = Array(text.utf8), escape = Array(#"\u0000"#.utf8)
        var index = 0
        while index + escape.count <= bytes.count {
            if bytes[index] == UInt8(ascii: "\\") {
                if bytes[index..<index + escape.count].elementsEqual(escape) { return lineAndColumn(ofByte: index, in: text) }
                index += 2
            } else {
                index += 1
            }
        }
        return (1, 1)
    }

    /// 1-based line and column (in bytes) of a byte offset.
    static func lineAndColumn(ofByte offset: Int, in text: String) -> (Int, Int) {
        var line = 1, column = 1
        for byte in text.utf8.prefix(offset) {
            if byte == UInt8(ascii: "\n") { line += 1; column = 1 } else { column += 1 }
        }
        return (line, column)
    }

    private mutating func readGroup(_ group: String, _ json: JSONValue) throws(PropBusError) {
        guard let members = json.objectMembers else { throw fail(group, "a group must be an object with \"properties\" and/or \"commands\"") }
        for member in members {
            guard let items = member.value.objectMembers else { throw fail(group, "\"\(member.key)\" must be an object of names") }
            switch member.key {
            case "properties":
                for item in items { collect { (file: inout ModelFile) throws(PropBusError) in try file.readProperty(group + "." + item.key, item.value) } }
            case "commands":
                for item in items { collect { (file: inout ModelFile) throws(PropBusError) in try file.readCommand(group + "." + item.key, item.value) } }
            default:
                throw fail(group, "unknown field \"\(member.key)\"; expected \"properties\" or \"commands\"")
            }
        }
    }

    private func parseKey(_ text: String) throws(PropBusError) -> Key {
        do { return try Key(text) } catch { throw fail(text, error.message) }
    }

    private mutating func readProperty(_ keyText: String, _ json: JSONValue) throws(PropBusError) {
        let key = try parseKey(keyText)
        guard let members = json.objectMembers else { throw fail(keyText, "a property must be an object with at least \"type\"") }
        guard let typeText = json["type"]?.stringValue else { throw fail(keyText, "\"type\" (a D-Bus signature such as \"s\" or \"a{sv}\") is missing") }
        let type: DBusType
        if let known = parsedTypes[typeText] {
            type = known
        } else {
            do { type = try DBusType(parsing: typeText) } catch {
                throw fail(keyText, "\"type\" \"\(typeText)\" is not a single complete D-Bus type: \(error.reason)")
            }
            parsedTypes[typeText] = type
        }
        func value(_ field: String, _ json: JSONValue, as type: DBusType) throws(PropBusError) -> DBusValue {
            do { return try ValueText.value(from: json, as: type) } catch {
                // Never the value itself: anyone may read the problem, and the file may declare
                // `secret` only further down.
                throw fail(keyText, "\"\(field)\" is not a valid '\(type.signature)' value (value refused): \(error.withoutValue)")
            }
        }
        var defaultValue = type.zeroValue
        var options: [String: DBusValue] = [:]
        for member in members {
            let field = member.key, item = member.value
            switch field {
            case "type":
                continue
            case "default":
                defaultValue = try value(field, item, as: type)
            case "value", "minimum", "maximum":
                options[field] = try value(field, item, as: type)
            case "persistent", "writable", "secret":
                guard let flag = item.boolValue else { throw fail(keyText, "\"\(field)\" must be true or false") }
                options[field] = .boolean(flag)
            case "description":
                guard let text = item.stringValue else { throw fail(keyText, "\"description\" must be a string") }
                options[field] = .string(text)
            case "scope":
                guard let text = item.stringValue, PropertyScope(rawValue: text) != nil else {
                    throw fail(keyText, "\"scope\" must be \"local\" or \"fleet\"")
                }
                options[field] = .string(text)
            case "choices":
                guard let items = item.arrayValue else { throw fail(keyText, "\"choices\" must be an array of '\(type.signature)' values") }
                var choices: [DBusValue] = []
                for choice in items { choices.append(.variant(try value(field, choice, as: type))) }
                options[field] = .array(of: .variant, choices)
            case "writers":
                guard let items = item.arrayValue, items.allSatisfy({ $0.stringValue != nil }) else {
                    throw fail(keyText, "\"writers\" must be an array of user names and @groups")
                }
                options[field] = .array(of: .string, items.compactMap(\.stringValue).map { .string($0) })
            default:
                throw fail(keyText, "unknown field \"\(field)\"; expected type, default, \(PropertyDefinition.optionNames.joined(separator: ", "))")
            }
        }
        // Where it came from, kept with the definition: a key its file drops can then leave the bus.
        options["source"] = .string(path)
        properties.append(PropertyDeclaration(key: key, type: type, defaultValue: defaultValue, options: options))
    }

    private mutating func readCommand(_ keyText: String, _ json: JSONValue) throws(PropBusError) {
        let key = try parseKey(keyText)
        do { try CommandDefinition.checkKey(key) } catch { throw fail(keyText, error.message) }
        guard let members = json.objectMembers else { throw fail(keyText, "a command must be an object") }
        var options: [String: DBusValue] = [:]
        for member in members {
            let field = member.key, item = member.value
            switch field {
            case "exec":
                guard let argv = item.arrayValue, !argv.isEmpty, argv.allSatisfy({ $0.stringValue != nil }) else {
                    throw fail(keyText, "\"exec\" must be a non-empty array of strings (an argv, run without a shell)")
                }
                var words = argv.compactMap(\.stringValue)
                // "./script" names a file beside the model file, wherever the daemon runs.
                if words[0].hasPrefix("./") || words[0].hasPrefix("../") {
                    // Stored commands outlive this working directory: keep the path absolute.
                    let cwd = FileSystem.currentDirectory
                    var directory = path.contains("/") ? String(path[..<path.lastIndex(of: "/")!]) : cwd
                    if !directory.hasPrefix("/") { directory = cwd + "/" + directory }
                    words[0] = directory + "/" + (words[0].hasPrefix("./") ? String(words[0].dropFirst(2)) : words[0])
                }
                options[field] = .array(of: .string, words.map { .string($0) })
            case "enabled_when":
                guard let text = item.stringValue else { throw fail(keyText, "\"enabled_when\" must be an expression string") }
                do { _ = try Expression(parsing: text) } catch { throw fail(keyText, "\"enabled_when\": \(error.message)") }
                options[field] = .string(text)
            case "handler", "concurrent", "persistent":
                guard let flag = item.boolValue else { throw fail(keyText, "\"\(field)\" must be true or false") }
                options[field] = .boolean(flag)
            case "timeout":
                guard let seconds = item.doubleValue, seconds > 0 else { throw fail(keyText, "\"timeout\" must be a positive number of seconds") }
                options[field] = .double(seconds)
            case "description":
                guard let text = item.stringValue else { throw fail(keyText, "\"description\" must be a string") }
                options[field] = .string(text)
            case "writers":
                guard let names = item.arrayValue?.compactMap(\.stringValue), names.count == item.arrayValue?.count else {
                    throw fail(keyText, "\"writers\" must be an array of user names, @groups or uids")
                }
                options[field] = .array(of: .string, names.map { .string($0) })
            default:
                throw fail(keyText, "unknown field \"\(field)\"; expected \(CommandDefinition.optionNames.joined(separator: ", "))")
            }
        }
        guard (options["exec"] != nil) != (options["handler"]?.boolValue == true) else {
            throw fail(keyText, "a command needs either \"exec\" or \"handler\": true")
        }
        commands.append(CommandDeclaration(key: key, options: options))
    }

    private mutating func readBinding(_ index: Int, _ json: JSONValue) throws(PropBusError) {
        let label = "bindings[\(index)]"
        guard let members = json.objectMembers, let key = json["key"]?.stringValue, let to = json["to"]?.stringValue else {
            throw fail(label, "a binding must be an object with \"key\" and \"to\"")
        }
        _ = try parseKey(key)
        _ = try parseKey(to)
        var options: [String: DBusValue] = [:]
        for member in members where member.key != "key" && member.key != "to" {
            switch member.key {
            case "direction", "to_key", "to_target":
                guard let text = member.value.stringValue else { throw fail(label, "\"\(member.key)\" must be a string") }
                options[member.key] = .string(text)
            default:
                throw fail(label, "unknown field \"\(member.key)\"; expected key, to, direction, to_key, to_target")
            }
        }
        // Checked as Bind checks them, now: a mistake is reported with the file's others.
        do { _ = try BindOptions(options: options, binding: "the binding \(key) ↔ \(to)") } catch { throw fail(label, error.message) }
        bindings.append(BindingDeclaration(key: key, to: to, options: options))
    }

    /// Registers the properties, then the commands, then makes the
    /// bindings, which may read command state. Errors name the file and the key.
    ///
    /// A key whose definition is `shared` (the fleet's) must be declared as it is defined, or
    /// the file is refused; its `value` is left out and a binding's first sync does not write it
    /// (the shared value stands).
    public func apply(to model: PropertyModel, commands table: CommandTable, shared: SharedDefinitions? = nil) throws(PropBusError) -> [PropertyChange] {
        // Every type change at once, before anything is declared.
        let typeChanges = typeChanges(in: model)
        if !typeChanges.isEmpty { throw PropBusError(.typeMismatch, typeChanges.joined(separator: "\n")) }
        var changes: [PropertyChange] = []
        changes.reserveCapacity(properties.count)
        model.reserveJournalCapacity(properties.count)
        model.reserveCapacity(properties.count)
        // A declaration that changes a key's value (a new default, a `value`) must not spread
        // through a binding into a shared key: that write would change it on this host only.
        let held = shared.map { shared in model.boundKeys(where: shared.contains) } ?? []
        for property in properties {
            let current = shared.flatMap { shared in model.entry(for: property.key).map(\.definition).flatMap { shared.contains($0) ? $0 : nil } }
            do {
                var options = property.options
                if current != nil { options["value"] = nil }
                changes += try model.create(key: property.key, type: property.type,
                                            defaultValue: property.defaultValue, options: options, holding: held)
            } catch {
                guard error.code == .typeMismatch else { throw fail(property.key.text, error.message) }
                throw typeChangeProblem(property.key.text, error.message)
            }
            // Checked on the definition the model made of the declaration: that is what would fork.
            if let current, let shared, let declared = model.entry(for: property.key)?.definition,
               let refusal = shared.refusal(current, declared) {
                throw fail(property.key.text, refusal)
            }
        }
        // In an order that works, so a predicate may read a command declared further down.
        if let (key, error) = table.recreate(commands.map { ($0.key, $0.options) }).first {
            throw fail(key.text, error.message)
        }
        // Nor may a binding's first sync write one, directly or through another binding: the
        // shared keys at the ends of the bindings there are and of those declared here.
        var heldByBindings: Set<Key> = []
        if let shared {
            heldByBindings = model.boundKeys(where: shared.contains)
            for binding in bindings {
                for end in [binding.key, binding.to] {
                    if let entry = try? model.entry(end), shared.contains(entry.definition) { heldByBindings.insert(entry.definition.key) }
                }
            }
        }
        for (index, binding) in bindings.enumerated() {
            do {
                // Declared bindings belong to the file: made again at each start, never stored.
                // Not a shared key: its first sync would write it here only, outside any call.
                changes += try model.bind(key: binding.key, to: binding.to, options: binding.options, owner: nil,
                                          holding: heldByBindings).changes
            } catch {
                throw fail("bindings[\(index)] (\(binding.key) ↔ \(binding.to))", error.message)
            }
        }
        return changes
    }
}

extension ModelFile {
    /// Where model files are read from at startup: `$XDG_CONFIG_HOME/propbus/models` (default
    /// `~/.config/propbus/models`) for a session bus, `/etc/propbus/models` for the system bus.
    public static func configDirectory(environment: [String: String], systemBus: Bool) -> String {
        if systemBus { return "/etc/propbus/models" }
        if let config = environment["XDG_CONFIG_HOME"], config.hasPrefix("/") { return config + "/propbus/models" }
        return Environment.home(in: environment) + "/.config/propbus/models"
    }

    /// The `*.json` files of `directory`, sorted by name; none when it does not exist.
    public static func files(in directory: String) -> [String] {
        let names = (try? FileSystem.contentsOfDirectory(directory)) ?? []
        return names.filter { $0.hasSuffix(".json") }.sorted().map { directory + "/" + $0 }
    }
}
