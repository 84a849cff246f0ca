import CommandLineKit
import DBus
import PropBus

/// `propctl get KEY...`: one line per key, or one JSON object with `--json`.
enum GetVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        var keys: [Key] = []
        for text in parsed.positionals("KEY") {
            do { keys.append(try PropbusClient.key(text)) } catch {
                // A top-level group typed where a key goes (`get settings`) is said to be one.
                guard let client = try? await PropbusClient.connect(parsed), let failure = await client.notAProperty(text) else { throw error }
                throw failure
            }
        }
        let client = try await PropbusClient.connect(parsed)
        var values: [(Key, DBusValue)] = []
        for key in keys { values.append((key, try await client.value(of: key))) }
        print(values, parsed)
    }

    /// `get` as `dbus-send` does it: connect, Hello and one blocking Get per key, on this
    /// thread, with no queue, task or thread started (those cost as much as the rest of the
    /// process). Returns `false`, having printed nothing, when the answer needs ``run(_:)``:
    /// an unknown key, whose error names the nearest existing one, or a word that is no key.
    static func runBlocking(_ parsed: ParsedCommand) throws(CommandFailure) -> Bool {
        // A word that is no key may be a group: ``run(_:)`` asks the daemon.
        guard let keys = try? keys(parsed) else { return false }
        let connection = try PropbusClient.connectBlocking(parsed)
        var values: [(Key, DBusValue)] = []
        for key in keys {
            do {
                values.append((key, try PropbusClient.value(of: key, through: connection)))
            } catch where PropbusClient.meansUnknownKey(error) {
                return false
            } catch {
                throw CommandFailure(error)
            }
        }
        print(values, parsed)
        return true
    }

    private static func keys(_ parsed: ParsedCommand) throws(CommandFailure) -> [Key] {
        var keys: [Key] = []
        for text in parsed.positionals("KEY") { keys.append(try PropbusClient.key(text)) }
        return keys
    }

    private static func print(_ values: [(Key, DBusValue)], _ parsed: ParsedCommand) {
        if parsed.flag("json") {
            Output.line(Output.json(.object(values.map { ($0.0.text, ValueText.jsonValue($0.1)) })))
        } else {
            // One key prints verbatim, so that `$(propctl get K)` gives the value back exactly;
            // several print one line each, so control characters are escaped to keep them apart.
            for (_, value) in values { Output.line(values.count == 1 ? ValueText.format(value) : Output.escaped(ValueText.format(value))) }
        }
    }
}
