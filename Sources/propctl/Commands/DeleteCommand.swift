import CommandLineKit
import PropBus

/// `propctl delete KEY`: `Manager.DeleteProperty`.
enum DeleteCommand: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let key = try PropbusClient.key(parsed.positional("KEY") ?? "")
        let client = try await PropbusClient.connect(parsed)
        _ = try await client.naming(key.text) { () async throws(CommandFailure) in
            try await client.manager("DeleteProperty", [.string(key.text)])
        }
        if parsed.flag("json") { Output.line(Output.json(.object([("deleted", .string(key.text))]))) }
    }
}
