import CommandLineKit
import DBus
import PropBus

/// `propctl revert [KEY|GROUP…] --to @REV` or `propctl revert --change REV [--force]`:
/// `Manager.Revert`, one atomic Apply recorded via Revert.
enum RevertCommand: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let keys = parsed.positionals("KEY")
        let to = parsed.option("to"), change = parsed.option("change")
        guard (to == nil) != (change == nil), (to == nil) || !keys.isEmpty else {
            throw CommandFailure(.usage, "revert expects KEY… --to @REV, or --change REV")
        }
        func revision(_ text: String, _ option: String) throws(CommandFailure) -> UInt64 {
            guard let value = UInt64(text.hasPrefix("@") ? String(text.dropFirst()) : text) else {
                throw CommandFailure(.usage, "\(option) expects a revision, @REV (e.g. @42), got '\(text)'")
            }
            return value
        }
        var toRevision: UInt64 = 0, changeRevision: UInt64 = 0
        if let to { toRevision = try revision(to, "--to") }
        if let change { changeRevision = try revision(change, "--change") }
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
