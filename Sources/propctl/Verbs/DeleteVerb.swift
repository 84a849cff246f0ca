import CommandLineKit
import PropBus

/// `propctl delete KEY`: `Manager.DeleteProperty`. The bindings that use the key end with it,
/// so they are named on stderr (a backup made before keeps them: `dump --definitions`).
enum DeleteVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let key = try PropbusClient.key(parsed.positional("KEY") ?? "")
        let client = try await PropbusClient.connect(parsed)
        let ending = ((try? await client.bindings(prefix: key.text)) ?? []).filter { $0.key == key.text || $0.to == key.text }
        _ = try await client.naming(key.text) { () async throws(CommandFailure) in
            try await client.manager("DeleteProperty", [.string(key.text)])
        }
        for binding in ending {
            Output.error("propctl delete: deleting \(key.text) ends the binding \(binding.path) (\(binding.key) ↔ \(binding.to))")
        }
        if parsed.flag("json") { Output.line(Output.json(.object([("deleted", .string(key.text))]))) }
    }
}
