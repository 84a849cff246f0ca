import CommandLineKit
import DBus
import PropBus
import SystemKit

/// `propctl load FILE [--create]`: checks a `dump` document (JSON or lines) against the
/// daemon's types, then applies it in one `Manager.Apply`, so it changes everything or nothing.
/// With `--create`, keys the daemon lacks are created first from their `definition`; if the
/// Apply is then refused, the keys this load created are deleted again. A command's state keys
/// in the document are left as the daemon has them.
enum LoadVerb: Subcommand {
    /// The `ListProperties` metadata that `dump --definitions` writes and `CreateProperty` takes.
    static let definitionOptions = ["default", "description", "minimum", "maximum", "choices", "persistent",
                                    "writable", "writers", "secret"]

    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let path = parsed.positional("FILE") ?? "-"
        let text: String
        if path == "-" {
            text = String(decoding: (try? FileDescriptor.standardInput.readToEnd()) ?? [], as: UTF8.self)
        } else {
            let bytes: [UInt8]
            do { bytes = try FileSystem.contents(of: path) } catch {
                throw CommandFailure(.usage, "cannot read \(path): \(error)")
            }
            guard let valid = String(validating: bytes, as: UTF8.self) else {
                throw CommandFailure(.usage, "cannot read \(path): it is not UTF-8 text")
            }
            text = valid
        }
        let document = try read(text, path: path)

        let client = try await PropbusClient.connect(parsed)
        var current = Dictionary(try await client.list(prefix: "").map { ($0.key, $0) }, uniquingKeysWith: { a, _ in a })
        var created: [String] = [], createdCommands: [String] = []
        if parsed.flag("create") {
            for member in document.properties where current[member.key] == nil {
                guard let definition = member.value["definition"] else { continue }
                try await create(member.key, member.value, definition, path: path, client)
                created.append(member.key)
            }
            let existing = document.commands.isEmpty ? [] : Set(try await client.commands().map(\.key))
            for command in document.commands where !existing.contains(command.key) {
                do {
                    _ = try await client.manager("CreateCommand", [.string(command.key), .vardict(try commandOptions(command, path: path))])
                    createdCommands.append(command.key)
                } catch {
                    for key in createdCommands { _ = try? await client.manager("DeleteCommand", [.string(key)]) }
                    for key in created { _ = try? await client.manager("DeleteProperty", [.string(key)]) }
                    throw error
                }
            }
            if !created.isEmpty || !createdCommands.isEmpty {
                current = Dictionary(try await client.list(prefix: "").map { ($0.key, $0) }, uniquingKeysWith: { a, _ in a })
            }
        }
        do {
            try await apply(document.properties, current: current, path: path, client: client, json: parsed.flag("json"), created: created.count)
        } catch {
            // All or nothing: keys and commands created for a document that was refused go again.
            for key in createdCommands { _ = try? await client.manager("DeleteCommand", [.string(key)]) }
            for key in created { _ = try? await client.manager("DeleteProperty", [.string(key)]) }
            throw error
        }
        // Binding the same persistent pair again returns the existing binding: loading twice
        // makes one. The leading side (`to`) wins, as the values just loaded agree.
        if parsed.flag("create") {
            for binding in document.bindings {
                guard let key = binding["key"]?.stringValue, let to = binding["to"]?.stringValue else {
                    throw CommandFailure(.usage, "\(path): a binding needs \"key\" and \"to\"")
                }
                var options: [String: DBusValue] = ["persistent": .boolean(true)]
                for member in binding["options"]?.objectMembers ?? [] {
                    guard let text = member.value.stringValue else { continue }
                    options[member.key] = .string(text)
                }
                _ = try await client.manager("Bind", [.string(key), .string(to), .vardict(options)])
            }
        }
    }

    /// What a `dump` document holds: its keys, and with `--definitions` the persistent bindings
    /// and commands of what it dumped.
    private struct Document {
        var properties: [JSONValue.Member] = []
        var bindings: [JSONValue] = []
        var commands: [JSONValue.Member] = []
    }

    /// A command's options in a document, as `CreateCommand` takes them.
    private static func commandOptions(_ command: JSONValue.Member, path: String) throws(CommandFailure) -> [String: DBusValue] {
        var options: [String: DBusValue] = [:]
        for member in command.value.objectMembers ?? [] {
            let value: DBusValue?
            switch member.key {
            case "exec", "writers": value = member.value.arrayValue.map { .array(of: .string, $0.compactMap(\.stringValue).map { .string($0) }) }
            case "handler", "concurrent", "persistent": value = member.value.boolValue.map { .boolean($0) }
            case "timeout": value = member.value.doubleValue.map { .double($0) }
            case "enabled_when", "description": value = member.value.stringValue.map { .string($0) }
            default: continue   // What a newer daemon lists besides its options.
            }
            guard let value else { throw CommandFailure(.usage, "\(path): command \(command.key): option \(member.key) has the wrong type") }
            options[member.key] = value
        }
        return options
    }

    /// A document: `dump`'s JSON, or its lines format.
    private static func read(_ text: String, path: String) throws(CommandFailure) -> Document {
        let trimmed = text.drop { $0 == " " || $0 == "\n" || $0 == "\t" }
        var document = Document()
        if trimmed.hasPrefix("{\"key\"") || trimmed.hasPrefix("{ \"key\"") {
            for (index, line) in text.split(separator: "\n").enumerated() where !line.allSatisfy({ $0 == " " }) {
                let object: JSONValue
                do { object = try JSONValue.parse(String(line)) } catch {
                    throw CommandFailure(.usage, "\(path):\(index + 1): invalid JSON: \(error)")
                }
                if let binding = object["binding"] {
                    document.bindings.append(binding)
                } else if let command = object["command"]?.stringValue {
                    let options: JSONValue = object["options"] ?? .object([(String, JSONValue)]())
                    document.commands.append(JSONValue.Member(command, options))
                } else if let key = object["key"]?.stringValue, let fields = object.objectMembers {
                    document.properties.append(JSONValue.Member(key, .object(fields.filter { $0.key != "key" }.map { ($0.key, $0.value) })))
                } else {
                    throw CommandFailure(.usage, "\(path):\(index + 1): expected {\"key\": …, \"type\": …, \"value\": …}")
                }
            }
            return document
        }
        do {
            let parsed = try JSONValue.parse(text)
            guard let members = parsed["properties"]?.objectMembers else {
                throw CommandFailure(.usage, "\(path): expected {\"properties\": {KEY: {\"type\": …, \"value\": …}}}, as 'propctl dump' writes")
            }
            document.properties = members
            document.bindings = parsed["bindings"]?.arrayValue ?? []
            document.commands = parsed["commands"]?.objectMembers ?? []
            return document
        } catch let error as CommandFailure {
            throw error
        } catch {
            throw CommandFailure(.usage, "\(path): invalid JSON: \(error)")
        }
    }

    private static func create(_ key: String, _ entry: JSONValue, _ definition: JSONValue, path: String,
                               _ client: PropbusClient) async throws(CommandFailure) {
        guard let typeText = entry["type"]?.stringValue, let type = try? DBusType(parsing: typeText) else {
            throw CommandFailure(.usage, "\(path): \(key): a key to create needs its \"type\"")
        }
        func value(_ json: JSONValue, _ what: String) throws(CommandFailure) -> DBusValue {
            do { return try ValueText.value(from: json, as: type) } catch {
                throw CommandFailure.badValue("\(path): \(key): \(what) is not a valid '\(typeText)' value: \(error.message)")
            }
        }
        var options: [String: DBusValue] = [:]
        var defaultValue = type.zeroValue
        for member in definition.objectMembers ?? [] {
            switch member.key {
            case "default": defaultValue = try value(member.value, "the default")
            case "minimum", "maximum": options[member.key] = try value(member.value, member.key)
            case "choices":
                var choices: [DBusValue] = []
                for choice in member.value.arrayValue ?? [] { choices.append(.variant(try value(choice, "a choice"))) }
                options["choices"] = .array(of: .variant, choices)
            case "persistent", "writable", "secret":
                guard let flag = member.value.boolValue else { throw CommandFailure.badValue("\(path): \(key): \(member.key) must be true or false") }
                options[member.key] = .boolean(flag)
            case "description":
                options["description"] = .string(member.value.stringValue ?? "")
            case "writers":
                options["writers"] = .array(of: .string, (member.value.arrayValue ?? []).compactMap(\.stringValue).map { .string($0) })
            default:
                continue   // Metadata a newer daemon may add (source, …) is not a creation option.
            }
        }
        _ = try await client.manager("CreateProperty", [.string(key), .string(typeText), .variant(defaultValue), .vardict(options)])
    }

    private static func apply(_ document: [JSONValue.Member], current: [String: ListedProperty], path: String,
                              client: PropbusClient, json: Bool, created: Int) async throws(CommandFailure) {
        var assignments: [DictionaryEntry] = []
        var resets: [DBusValue] = []
        for member in document {
            let key = member.key
            guard let existing = current[key] else {
                let hint = member.value["definition"] == nil ? "" : " (load --create creates it from its definition)"
                throw CommandFailure(.dbusError, "\(PropBusError.Code.unknownKey.dbusName): \(path): no property named \(key)\(hint)")
            }
            // A command's state keys are the command's to set (read-only to everyone): a dump
            // holds them as they were, and loading it leaves them as they are.
            if existing.metadata["state_of"] != nil { continue }
            guard member.value.objectMembers != nil, let value = member.value["value"] else {
                throw CommandFailure(.usage, "\(path): \(key): expected an object with \"type\" and \"value\"")
            }
            if let type = member.value["type"]?.stringValue, type != existing.type {
                throw CommandFailure(.dbusError, "\(PropBusError.Code.typeMismatch.dbusName): \(path): \(key) has type '\(existing.type)' in the daemon, '\(type)' in the file")
            }
            let wantsSet = member.value["is_set"]?.boolValue ?? true
            let isSet = existing.metadata["is_set"]?.boolValue ?? true
            if !wantsSet {
                if isSet { resets.append(.string(key)) }
                continue
            }
            let parsedValue: DBusValue
            do {
                parsedValue = try ValueText.value(from: value, as: DBusType(parsing: existing.type))
            } catch let error as ValueTextError {
                throw CommandFailure.badValue("\(path): \(key): not a valid '\(existing.type)' value: \(error.message)")
            } catch {
                throw CommandFailure.badValue("\(path): \(key): \(error)")
            }
            // Against the user's value: an override or a lock showing the same value hides a different one.
            if parsedValue != DumpVerb.userValue(of: existing) || !isSet {
                assignments.append(DictionaryEntry(.string(key), .variant(parsedValue)))
            }
        }
        if !assignments.isEmpty || !resets.isEmpty {
            _ = try await client.manager("Apply", [.dictionary(key: .string, value: .variant, assignments), .array(of: .string, resets)])
        }
        if json {
            Output.line(Output.json(.object([("created", .number(created)), ("set", .number(assignments.count)), ("reset", .number(resets.count))])))
        }
    }
}
