import CommandLineKit
import DBus
import PropBus

/// `propctl reset KEY` (`Values.Reset`), or `reset --recursive PREFIX`: every set key of a group
/// and its subgroups in one `Manager.Apply`, so all of them read their defaults again, or none.
enum ResetVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let text = parsed.positional("KEY") ?? ""
        if parsed.flag("recursive") { return try await resetGroup(text, parsed) }
        let key = try PropbusClient.key(text)
        let client = try await PropbusClient.connect(parsed)
        _ = try await client.naming(key.text) { () async throws(CommandFailure) in
            try await client.call(key.objectPath, PropbusClient.valuesInterface, "Reset", [.string(key.name)])
        }
        if parsed.flag("json") {
            let value = try await client.value(of: key)
            Output.line(Output.json(.object([("key", .string(key.text)), ("value", ValueText.jsonValue(value))])))
        }
    }

    private static func resetGroup(_ prefix: String, _ parsed: ParsedCommand) async throws(CommandFailure) {
        guard !KeyPrefix(prefix).text.isEmpty else {
            throw CommandFailure(.usage, "--recursive needs a group such as settings; every key at once is not reset by accident")
        }
        let client = try await PropbusClient.connect(parsed)
        let items = try await client.selection(prefix)
        // Keys reading their default have nothing to forget; read-only ones (command state)
        // are not the user's to reset, and one refusal would make the whole Apply fail.
        let keys = items.filter { ($0.metadata["is_set"]?.boolValue ?? false) && ($0.metadata["writable"]?.boolValue ?? true) }.map(\.key)
        if !keys.isEmpty {
            _ = try await client.manager("Apply", [.dictionary(key: .string, value: .variant, []), .array(of: .string, keys.map { .string($0) })])
        }
        if parsed.flag("json") { Output.line(Output.json(.object([("reset", .array(keys.map { .string($0) }))]))) }
    }
}
