import DBus
import PropBus

/// `propctl status`: whether propbusd runs on the selected bus, its version and size.
enum StatusCommand: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let client = try await PropbusClient.connect(parsed)
        let owner: String
        do {
            owner = try await client.connection.callBus("GetNameOwner", [.string(PropbusClient.busName)]).first?.stringValue ?? ""
        } catch {
            if parsed.flag("json") {
                Output.line(Output.json(.object([("running", .bool(false))])))
            } else {
                Output.line("propbusd is not running on this bus (\(PropbusClient.busName) has no owner)")
            }
            throw CommandFailure(.unavailable, "propbusd is not running: \(error.message)")
        }
        let version = try await client.call(Key.rootPath, PropbusClient.propertiesInterface, "Get",
                                            [.string(PropbusClient.managerInterface), .string("Version")])
            .first?.unwrappingVariantOnce.stringValue ?? "?"
        let properties = try await client.list(prefix: "")
        let groups = Set(properties.compactMap { try? Key($0.key).group })
        if parsed.flag("json") {
            Output.line(Output.json(.object([
                ("running", .bool(true)), ("name", .string(PropbusClient.busName)), ("owner", .string(owner)),
                ("version", .string(version)), ("properties", .number(properties.count)), ("groups", .number(groups.count)),
            ])))
            return
        }
        Output.line(Output.table(header: ["FIELD", "VALUE"], rows: [
            ["status", "running"], ["name", PropbusClient.busName], ["owner", owner], ["version", version],
            ["properties", String(properties.count)], ["groups", String(groups.count)],
        ]))
    }
}
