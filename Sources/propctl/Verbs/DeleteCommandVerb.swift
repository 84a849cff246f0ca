import CommandLineKit
import PropBus

/// `propctl delete-command KEY`: `Manager.DeleteCommand`.
enum DeleteCommandVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let key = try PropbusClient.key(parsed.positional("KEY") ?? "")
        let client = try await PropbusClient.connect(parsed)
        do {
            _ = try await client.manager("DeleteCommand", [.string(key.text)])
        } catch where error.message.hasPrefix(PropBusError.Code.unknownKey.dbusName) {
            throw await client.unknownCommand(key.text)
        }
        if parsed.flag("json") { Output.line(Output.json(.object([("deleted", .string(key.text))]))) }
    }
}
