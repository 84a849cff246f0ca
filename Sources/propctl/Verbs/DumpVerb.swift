import CommandLineKit
import DBus
import PropBus

/// `propctl dump [PREFIX] [--definitions] [--format json|lines]`: keys, types, values and
/// is_set, and with `--definitions` what `load --create` needs to create missing keys.
enum DumpVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let format = parsed.option("format") ?? "json"
        guard format == "json" || format == "lines" else {
            throw CommandFailure(.usage, "unknown --format '\(format)'; expected json or lines")
        }
        let client = try await PropbusClient.connect(parsed)
        let items = try await client.selection(parsed.positional("PREFIX") ?? "")
        let definitions = parsed.flag("definitions")
        let entries = items.map { item in (item.key, entry(item, definitions: definitions)) }
        // A whole backup: what `load --create` needs to make the selection's persistent
        // bindings and commands again (a deleted key ends its bindings).
        let selection = KeyPrefix(parsed.positional("PREFIX") ?? "")
        let bindings = definitions ? try await persistentBindings(client, touching: selection) : []
        let commands = definitions ? try await commandEntries(client, in: selection) : []
        if format == "lines" {
            // One key per line, sorted: a diff of two dumps shows exactly the keys that changed.
            for (key, entry) in entries {
                Output.line(JSONValue.object([("key", .string(key))] + (entry.objectMembers ?? []).map { ($0.key, $0.value) }).serialized(pretty: false))
            }
            for binding in bindings { Output.line(JSONValue.object([("binding", binding)]).serialized(pretty: false)) }
            for (key, options) in commands {
                Output.line(JSONValue.object([("command", .string(key)), ("options", options)]).serialized(pretty: false))
            }
            return
        }
        var document: [(String, JSONValue)] = [("properties", .object(entries))]
        if definitions {
            document.append(("bindings", .array(bindings)))
            document.append(("commands", .object(commands)))
        }
        Output.line(JSONValue.object(document).serialized(pretty: true))
    }

    /// The persistent bindings with an end in `selection`: key, to and their Bind options.
    static func persistentBindings(_ client: PropbusClient, touching selection: KeyPrefix) async throws(CommandFailure) -> [JSONValue] {
        // Every key the selection matches starts with its text: the daemon narrows by that.
        try await client.bindings(prefix: selection.text).filter { binding in
            binding.options["persistent"]?.boolValue == true && (selection.matches(binding.key) || selection.matches(binding.to))
        }.map { binding in
            let options = ["direction", "to_key", "to_target"].compactMap { name in
                binding.options[name].map { (name, ValueText.jsonValue($0)) }
            }
            return .object([("key", .string(binding.key)), ("to", .string(binding.to)), ("options", .object(options))])
        }
    }

    /// The commands in `selection`, with the options `CreateCommand` takes.
    static func commandEntries(_ client: PropbusClient, in selection: KeyPrefix) async throws(CommandFailure) -> [(String, JSONValue)] {
        try await client.commands().filter { selection.matches($0.key) }.map { command in
            let options = CommandDefinition.optionNames.compactMap { name in
                command.info[name].map { (name, ValueText.jsonValue($0)) }
            }
            return (command.key, .object(options))
        }
    }

    /// The user's own value of `item`, which a dump saves (a backup of what users set): the value
    /// shown, unless an override or a lock hides it (`user_value`; a key not set under one is
    /// saved with its default, and `is_set` false resets it when loaded).
    static func userValue(of item: ListedProperty) -> DBusValue {
        if let user = item.metadata["user_value"] { return user }
        switch item.metadata["layer"]?.stringValue {
        case "override"?, "mandatory"?: return item.metadata["default"] ?? item.value
        default: return item.value
        }
    }

    /// The document entry of one key.
    static func entry(_ item: ListedProperty, definitions: Bool) -> JSONValue {
        var members: [(String, JSONValue)] = [
            ("type", .string(item.type)),
            ("value", ValueText.jsonValue(userValue(of: item))),
            ("is_set", .bool(item.metadata["is_set"]?.boolValue ?? true)),
        ]
        // A command's state keys come with the command; they cannot be created alone.
        if definitions, item.metadata["state_of"] == nil {
            var definition: [(String, JSONValue)] = []
            for name in LoadVerb.definitionOptions {
                guard let value = item.metadata[name] else { continue }
                if case .string("") = value, name == "description" { continue }
                definition.append((name, ValueText.jsonValue(value)))
            }
            members.append(("definition", .object(definition)))
        }
        return .object(members)
    }
}
