import CommandLineKit
import DBus
import Glibc
import PropBus

/// `propctl status`: whether propbusd runs on the selected bus, its version and size.
enum StatusCommand: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let client = try await PropbusClient.connect(parsed)
        let owner: String
        do {
            owner = try await client.connection.callBus("GetNameOwner", [.string(PropbusClient.busName)]).first?.stringValue ?? ""
        } catch {
            // One message: the JSON document for scripts, or the stderr line for people.
            if parsed.flag("json") {
                Output.line(Output.json(.object([("running", .bool(false))])))
                exit(CommandFailure.ExitCode.unavailable.rawValue)
            }
            throw CommandFailure(.unavailable, CommandFailure.notRunning)
        }
        let version = try await client.call(Key.rootPath, PropbusClient.propertiesInterface, "Get",
                                            [.string(PropbusClient.managerInterface), .string("Version")])
            .first?.unwrappingVariantOnce.stringValue ?? "?"
        let properties = try await client.list(prefix: "")
        let groups = Set(properties.compactMap { try? Key($0.key).group })
        let commands = try await client.commands()
        // An older propbusd has no such property: then nothing was skipped that it could say.
        let skipped = SkippedFiles.decode(try? await client.call(Key.rootPath, PropbusClient.propertiesInterface, "Get",
                                                                 [.string(PropbusClient.managerInterface), .string("SkippedModelFiles")]).first)
        let executions = try await client.executions()
        if parsed.flag("json") {
            Output.line(Output.json(.object([
                ("running", .bool(true)), ("name", .string(PropbusClient.busName)), ("owner", .string(owner)),
                ("skipped_model_files", SkippedFiles.json(skipped)),
                ("version", .string(version)), ("properties", .number(properties.count)), ("groups", .number(groups.count)),
                ("commands", .array(commands.map { command in
                    .object([("key", .string(command.key))] + command.info.sorted { $0.key < $1.key }.map { ($0.key, ValueText.jsonValue($0.value)) })
                })),
                ("executions", .array(executions.map { execution in
                    .object([("id", .unsignedInteger(execution.id)), ("key", .string(execution.key)), ("caller", .string(execution.caller))])
                })),
            ])))
            return
        }
        Output.line(Output.table(header: ["FIELD", "VALUE"], rows: [
            ["status", "running"], ["name", PropbusClient.busName], ["owner", owner], ["version", version],
            ["properties", String(properties.count)], ["groups", String(groups.count)], ["commands", String(commands.count)],
        ]))
        if !skipped.isEmpty {
            Output.line("")
            Output.line("Skipped model files (fix them, then propctl reload):")
            for file in skipped { Output.line("  " + file.reason) }
        }
        if !commands.isEmpty {
            Output.line("")
            Output.line(Output.table(header: ["COMMAND", "ENABLED", "EXECUTING", "EXECUTIONS", "RUNS"], rows: commands.map { command in
                let flag = { (name: String) in command.info[name]?.boolValue == true ? "yes" : "no" }
                let runs: String
                if case .array(_, let argv)? = command.info["exec"] {
                    runs = argv.compactMap(\.stringValue).joined(separator: " ")
                } else {
                    let owner = command.info["handler_owner"]?.stringValue ?? ""
                    runs = owner.isEmpty ? "handler (none registered)" : "handler \(owner)"
                }
                return [command.key, flag("enabled"), flag("executing"), command.info["executions"].map(ValueText.format) ?? "0", runs]
            }))
        }
        guard !executions.isEmpty else { return }
        Output.line("")
        Output.line(Output.table(header: ["EXECUTION", "COMMAND", "CALLER"], rows: executions.map { execution in
            [String(execution.id), execution.key, execution.caller]
        }))
    }
}
