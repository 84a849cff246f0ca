import CommandLineKit
import DBus
import Glibc
import PropBus

/// `propctl override KEY VALUE [--for DURATION] [-- CMD [ARG...]]`: `Manager.Override`, held by
/// this propctl's connection while CMD runs (or until interrupted), then `ReleaseOverride`; with
/// `--for` and no CMD, a TTL override the daemon ends by itself, and propctl exits at once.
enum OverrideVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let key = try PropbusClient.key(parsed.positional("KEY") ?? "")
        let text = parsed.positional("VALUE") ?? ""
        let duration = try parsed.option("for").map { text throws(CommandFailure) in try LeaseHolding.seconds(text, option: "--for") }
        let command = parsed.positional("CMD").map { [$0] + parsed.positionals("ARG") } ?? []
        // A command that closes its output early must not kill propctl before it lets go.
        signal(SIGPIPE, SIG_IGN)
        let client = try await PropbusClient.connect(parsed)
        let type = try await client.type(of: key)
        let value: DBusValue
        do { value = try ValueText.parse(text, as: type) } catch { throw .badValue(key.text, error) }
        // With --for the daemon ends it on time (also across its restart), whatever happens here.
        let options: [String: DBusValue] = duration.map { ["ttl": .double($0)] } ?? [:]
        let reply = try await client.manager("Override", [.string(key.text), .variant(value), .vardict(options)])
        guard case .uint64(let handle)? = reply.first else {
            throw CommandFailure(.dbusError, "propbusd answered Override with \(reply)")
        }
        // stdout is the command's; without one it says the handle, for ReleaseOverride elsewhere.
        if command.isEmpty {
            if parsed.flag("json") {
                Output.line(Output.json(.object([("key", .string(key.text)), ("handle", .unsignedInteger(handle)), ("value", ValueText.jsonValue(value))])))
            } else {
                Output.line(String(handle))
            }
        }
        // Set and left: the daemon keeps a TTL override (also across its restart) and ends it on
        // time, so nothing here needs to wait for it, nor may Ctrl-C end it early.
        if command.isEmpty, duration != nil { return }
        let outcome = try await LeaseHolding.hold(client.connection, running: command, for: duration)
        do {
            _ = try await client.manager("ReleaseOverride", [.uint64(handle)])
        } catch where error.message.contains(PropBusError.Code.unknownKey.dbusName) {
            // Ended already: its TTL ran out, or the daemon restarted.
        }
        if case .commandExited(let status) = outcome, status != 0 {
            // The command's own status, which no CommandFailure code says.
            exit(status)
        }
    }
}
