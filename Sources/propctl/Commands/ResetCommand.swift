import PropBus

/// `propctl reset KEY`: `Values.Reset`, so the key reads its default again.
enum ResetCommand: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let key = try PropbusClient.key(parsed.positional("KEY") ?? "")
        let client = try await PropbusClient.connect(parsed)
        _ = try await client.call(key.objectPath, PropbusClient.valuesInterface, "Reset", [.string(key.name)])
        if parsed.flag("json") {
            let value = try await client.value(of: key)
            Output.line(Output.json(.object([("key", .string(key.text)), ("value", ValueText.jsonValue(value))])))
        }
    }
}
