import CommandLineKit
import DBus
import PropBus

/// `propctl list [--groups|--names] [--changed] [PREFIX]`: keys, types and values, as a table
/// or JSON. A `*` in a fourth column marks a key whose value differs from its default.
enum ListVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let client = try await PropbusClient.connect(parsed)
        var items = try await client.selection(parsed.positional("PREFIX") ?? "")
        if parsed.flag("changed") { items = items.filter(isModified) }
        if parsed.flag("locked") { items = items.filter { $0.metadata["locked"]?.boolValue == true } }
        // Names only, one per line, for scripts and for a user looking for a key
        // (gsettings list-keys, list-schemas; dconf list).
        if parsed.flag("names") || parsed.flag("groups") {
            let names = parsed.flag("names") ? items.map(\.key).sorted() : groups(of: items.map(\.key))
            if parsed.flag("json") {
                Output.line(Output.json(.array(names.map { .string($0) })))
            } else if !names.isEmpty {
                Output.line(names.joined(separator: "\n"))
            }
            return
        }
        if parsed.flag("json") {
            Output.line(Output.json(.array(items.map(json))))
            return
        }
        guard !items.isEmpty else { return }
        // The marker has a column of its own, so `cut -f3` still gives the bare value.
        Output.line(Output.table(header: ["KEY", "TYPE", "VALUE", ""], rows: items.map { item in
            [item.key, item.type, Output.escaped(ValueText.format(item.value)), isModified(item) ? "*" : ""]
        }))
    }

    /// The groups holding `keys` (a key's name without its last component), sorted, once each.
    static func groups(of keys: [String]) -> [String] {
        Set(keys.compactMap { key in key.lastIndex(of: ".").map { String(key[..<$0]) } }).sorted()
    }

    /// Whether the value differs from the registered default (gsettings' "modified").
    static func isModified(_ item: ListedProperty) -> Bool {
        // A command's state is not a setting: it is never "modified".
        guard item.metadata["state_of"] == nil, let defaultValue = item.metadata["default"] else { return false }
        return defaultValue != item.value
    }

    /// One property as a JSON object: key, type, value, `modified` and every metadata entry.
    static func json(_ item: ListedProperty) -> JSONValue {
        var members: [(String, JSONValue)] = [("key", .string(item.key)), ("type", .string(item.type)),
                                              ("value", ValueText.jsonValue(item.value)), ("modified", .bool(isModified(item)))]
        for (name, value) in item.metadata.sorted(by: { $0.key < $1.key }) {
            members.append((name, ValueText.jsonValue(value)))
        }
        return .object(members)
    }
}
