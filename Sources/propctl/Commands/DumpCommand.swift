import PropBus

/// `propctl dump [PREFIX]`: one JSON document of keys, types, values and is_set.
enum DumpCommand: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let client = try await PropbusClient.connect(parsed)
        let items = try await client.list(prefix: parsed.positional("PREFIX") ?? "")
        let properties = items.map { item in
            (item.key, JSONValue.object([
                ("type", .string(item.type)),
                ("value", ValueText.jsonValue(item.value)),
                ("is_set", .bool(item.metadata["is_set"]?.boolValue ?? true)),
            ]))
        }
        Output.line(JSONValue.object([("properties", .object(properties))]).serialized(pretty: true))
    }
}
