import CommandLineKit
import DBus
import PropBus

/// `propctl get KEY...`: one line per key, or one JSON object with `--json`.
enum GetCommand: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        var keys: [Key] = []
        for text in parsed.positionals("KEY") { keys.append(try PropbusClient.key(text)) }
        let client = try await PropbusClient.connect(parsed)
        var values: [(Key, DBusValue)] = []
        for key in keys { values.append((key, try await client.value(of: key))) }
        if parsed.flag("json") {
            Output.line(Output.json(.object(values.map { ($0.0.text, ValueText.jsonValue($0.1)) })))
        } else {
            // One key prints verbatim, so that `$(propctl get K)` gives the value back exactly;
            // several print one line each, so control characters are escaped to keep them apart.
            for (_, value) in values { Output.line(values.count == 1 ? ValueText.format(value) : Output.escaped(ValueText.format(value))) }
        }
    }
}
