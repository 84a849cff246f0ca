import DBus
import PropBus

/// `propctl exec KEY [INPUT] [--type TYPE] [--no-wait]`: `Command.Execute` (or `Start`).
enum ExecCommand: Subcommand {
    static let commandInterface = "org.propbus.PropBus1.Command"

    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let key = try PropbusClient.key(parsed.positional("KEY") ?? "")
        let typeText = parsed.option("type") ?? "s"
        let type: DBusType
        do { type = try DBusType(parsing: typeText) } catch {
            throw CommandFailure(.usage, "--type '\(typeText)' is not a single complete D-Bus type")
        }
        let input: DBusValue
        do { input = try ValueText.parse(parsed.positional("INPUT") ?? "", as: type) } catch {
            throw CommandFailure(.usage, "INPUT is not a valid '\(type.signature)' value: \(error.message)")
        }
        let client = try await PropbusClient.connect(parsed)
        let path = Key.objectPath(ofGroup: key.text)
        let json = parsed.flag("json")
        if parsed.flag("no-wait") {
            let reply = try await command(client, key, path, "Start", input)
            guard case .uint64(let id)? = reply.first else { throw CommandFailure(.dbusError, "propbusd answered Start with \(reply)") }
            Output.line(json ? Output.json(.object([("key", .string(key.text)), ("id", .unsignedInteger(id))])) : String(id))
            return
        }
        let reply = try await command(client, key, path, "Execute", input)
        let result = reply.first?.unwrappingVariantOnce ?? .string("")
        Output.line(json ? Output.json(.object([("key", .string(key.text)), ("result", ValueText.jsonValue(result))]))
                         : ValueText.format(result))
    }

    /// Calls a Command method without a client-side timeout: an execution takes what it takes.
    private static func command(_ client: PropbusClient, _ key: Key, _ path: String, _ member: String,
                                _ input: DBusValue) async throws(CommandFailure) -> [DBusValue] {
        do {
            return try await client.connection.call(destination: PropbusClient.busName, path: path, interface: commandInterface,
                                                    member: member, arguments: [.variant(input)], timeoutMilliseconds: Int32.max)
        } catch where error.name == DBusError.Name.unknownObject || error.name == DBusError.Name.unknownInterface {
            // The bus speaks of objects; the user named a command.
            throw CommandFailure(DBusError(name: "org.propbus.PropBus1.Error.UnknownKey", message: "no command named \(key) (\(error.message))"))
        } catch {
            throw CommandFailure(error)
        }
    }
}
