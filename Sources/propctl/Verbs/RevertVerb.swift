import CommandLineKit
import DBus
import PropBus

/// `propctl revert [KEY|GROUP…] --to @REV` or `propctl revert --change REV [--force]`:
/// `Manager.Revert`, one atomic Apply recorded via Revert.
enum RevertVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let keys = parsed.positionals("KEY")
        let to = parsed.option("to"), change = parsed.option("change")
        guard (to == nil) != (change == nil), (to == nil) || !keys.isEmpty else {
            throw CommandFailure(.usage, "revert expects KEY… --to @REV, or --change REV")
        }
        var toRevision: UInt64 = 0, changeRevision: UInt64 = 0
        if let to { toRevision = try HistoryVerb.revision(to, "--to") ?? 0 }
        if let change { changeRevision = try HistoryVerb.revision(change, "--change") ?? 0 }
        let client = try await PropbusClient.connect(parsed)
        let reply = try await client.manager("Revert", [
            .array(of: .string, keys.map(DBusValue.string)), .uint64(toRevision), .uint64(changeRevision), .boolean(parsed.flag("force")),
        ])
        guard case .array(_, let reverted)? = reply.first else { return }
        if parsed.flag("json") {
            Output.line(Output.json(.array(reverted.compactMap(\.stringValue).map(JSONValue.string))))
        } else {
            for key in reverted.compactMap(\.stringValue) { Output.line("reverted \(key)") }
        }
    }
}
