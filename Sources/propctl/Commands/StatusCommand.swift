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
        // An older propbusd has neither: shown as off.
        let fleetState = (try? await client.call(Key.rootPath, PropbusClient.propertiesInterface, "Get",
                                                 [.string(PropbusClient.managerInterface), .string("FleetState")]))?
            .first?.unwrappingVariantOnce.stringValue ?? "off"
        let fleetRevision = (try? await client.call(Key.rootPath, PropbusClient.propertiesInterface, "Get",
                                                    [.string(PropbusClient.managerInterface), .string("FleetRevision")]))?
            .first.flatMap { value -> UInt64? in if case .uint64(let n) = value.unwrappingVariantOnce { n } else { nil } } ?? 0
        var hosts: [String] = []
        // Without etcd the status is still shown, with the fleet row; the host list's failure
        // is one line on stderr, after it.
        var hostsFailure: CommandFailure?
        if parsed.flag("fleet") {
            guard fleetState != "off" else {
                throw CommandFailure(.unavailable, "propbusd runs without --fleet: there is no fleet to list")
            }
            do {
                if case .array(_, let items)? = try await client.manager("ListFleetHosts").first {
                    hosts = items.compactMap(\.stringValue)
                }
            } catch {
                hostsFailure = error
            }
        }
        if parsed.flag("json") {
            Output.line(Output.json(.object([
                ("running", .bool(true)), ("name", .string(PropbusClient.busName)), ("owner", .string(owner)),
                ("skipped_model_files", SkippedFiles.json(skipped)),
                ("version", .string(version)), ("properties", .number(properties.count)), ("groups", .number(groups.count)),
                ("fleet_state", .string(fleetState)), ("fleet_revision", .unsignedInteger(fleetRevision)),
                ("commands", .array(commands.map { command in
                    .object([("key", .string(command.key))] + command.info.sorted { $0.key < $1.key }.map { ($0.key, ValueText.jsonValue($0.value)) })
                })),
                ("executions", .array(executions.map { execution in
                    .object([("id", .unsignedInteger(execution.id)), ("key", .string(execution.key)), ("caller", .string(execution.caller))])
                })),
            ] + (parsed.flag("fleet") && hostsFailure == nil ? [("fleet_hosts", .array(hosts.map { .string($0) }))] : []))))
            if let hostsFailure { throw hostsFailure }
            return
        }
        Output.line(Output.table(header: ["FIELD", "VALUE"], rows: [
            ["status", "running"], ["name", PropbusClient.busName], ["owner", owner], ["version", version],
            ["properties", String(properties.count)], ["groups", String(groups.count)], ["commands", String(commands.count)],
            ["fleet", fleetState == "off" ? "off" : "\(fleetState), etcd revision \(fleetRevision)"],
        ]))
        if parsed.flag("fleet"), hostsFailure == nil {
            Output.line("")
            Output.line(Output.table(header: ["HOST"], rows: hosts.map { [$0] }))
        }
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
        if !executions.isEmpty {
            Output.line("")
            Output.line(Output.table(header: ["EXECUTION", "COMMAND", "CALLER"], rows: executions.map { execution in
                [String(execution.id), execution.key, execution.caller]
            }))
        }
        // Last, after everything that could be shown: one line on stderr, and the exit status.
        if let hostsFailure { throw hostsFailure }
    }
}
