import DBus
import PropBus

/// `propctl list [PREFIX]`: keys, types and values, as a table or JSON.
enum ListCommand: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let client = try await PropbusClient.connect(parsed)
        let items = try await client.list(prefix: parsed.positional("PREFIX") ?? "")
        if parsed.flag("json") {
            Output.line(Output.json(.array(items.map(json))))
            return
        }
        guard !items.isEmpty else { return }
        Output.line(Output.table(header: ["KEY", "TYPE", "VALUE"],
                                 rows: items.map { [$0.key, $0.type, ValueText.format($0.value)] }))
    }

    /// One property as a JSON object: key, type, value and every metadata entry.
    static func json(_ item: ListedProperty) -> JSONValue {
        var members: [(String, JSONValue)] = [("key", .string(item.key)), ("type", .string(item.type)),
                                              ("value", ValueText.jsonValue(item.value))]
        for (name, value) in item.metadata.sorted(by: { $0.key < $1.key }) {
            members.append((name, ValueText.jsonValue(value)))
        }
        return .object(members)
    }
}
