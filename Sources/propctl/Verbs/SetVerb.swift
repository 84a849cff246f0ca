import CommandLineKit
import DBus
import PropBus

/// `propctl set KEY VALUE`: reads VALUE by the key's type, then `Properties.Set`.
enum SetVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let key = try PropbusClient.key(parsed.positional("KEY") ?? "")
        let text = parsed.positional("VALUE") ?? ""
        let client = try await PropbusClient.connect(parsed)
        let type = try await client.type(of: key)
        let value: DBusValue
        do { value = try ValueText.parse(text, as: type) } catch { throw .badValue(key.text, error) }
        _ = try await client.call(key.objectPath, PropbusClient.propertiesInterface, "Set",
                                  [.string(PropbusClient.valuesInterface), .string(key.name), .variant(value)])
        if parsed.flag("json") {
            Output.line(Output.json(.object([("key", .string(key.text)), ("value", ValueText.jsonValue(value))])))
        }
    }
}
