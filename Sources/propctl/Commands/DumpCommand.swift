import CommandLineKit
import DBus
import PropBus

/// `propctl dump [PREFIX] [--definitions] [--format json|lines]`: keys, types, values and
/// is_set, and with `--definitions` what `load --create` needs to create missing keys.
enum DumpCommand: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let format = parsed.option("format") ?? "json"
        guard format == "json" || format == "lines" else {
            throw CommandFailure(.usage, "unknown --format '\(format)'; expected json or lines")
        }
        let client = try await PropbusClient.connect(parsed)
        let items = try await client.selection(parsed.positional("PREFIX") ?? "")
        let definitions = parsed.flag("definitions")
        let entries = items.map { item in (item.key, entry(item, definitions: definitions)) }
        if format == "lines" {
            // One key per line, sorted: a diff of two dumps shows exactly the keys that changed.
            for (key, entry) in entries {
                Output.line(JSONValue.object([("key", .string(key))] + (entry.objectMembers ?? []).map { ($0.key, $0.value) }).serialized(pretty: false))
            }
            return
        }
        Output.line(JSONValue.object([("properties", .object(entries))]).serialized(pretty: true))
    }

    /// The document entry of one key.
    static func entry(_ item: ListedProperty, definitions: Bool) -> JSONValue {
        var members: [(String, JSONValue)] = [
            ("type", .string(item.type)),
            ("value", ValueText.jsonValue(item.value)),
            ("is_set", .bool(item.metadata["is_set"]?.boolValue ?? true)),
        ]
        // A command's state keys come with the command; they cannot be created alone.
        if definitions, item.metadata["state_of"] == nil {
            var definition: [(String, JSONValue)] = []
            for name in LoadCommand.definitionOptions {
                guard let value = item.metadata[name] else { continue }
                if case .string("") = value, name == "description" { continue }
                definition.append((name, ValueText.jsonValue(value)))
            }
            members.append(("definition", .object(definition)))
        }
        return .object(members)
    }
}
