import CommandLineKit
import DBus
import PropBus

/// `propctl cancel KEY [ID]`: `Command.Cancel` of one execution, or of every running one.
enum CancelVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let key = try PropbusClient.key(parsed.positional("KEY") ?? "")
        var ids: [UInt64] = []
        if let text = parsed.positional("ID") {
            guard let id = UInt64(text) else { throw CommandFailure(.usage, "ID must be an execution id such as 7, got '\(text)'") }
            ids = [id]
        }
        let client = try await PropbusClient.connect(parsed)
        guard try await client.commands().contains(where: { $0.key == key.text }) else {
            throw await client.unknownCommand(key.text)
        }
        if ids.isEmpty {
            ids = try await client.executions().filter { $0.key == key.text }.map(\.id)
        }
        for id in ids {
            _ = try await client.call(Key.objectPath(ofGroup: key.text), ExecVerb.commandInterface, "Cancel", [.uint64(id)])
        }
        if parsed.flag("json") {
            Output.line(Output.json(.object([("key", .string(key.text)), ("cancelled", .array(ids.map { .unsignedInteger($0) }))])))
        }
    }
}
