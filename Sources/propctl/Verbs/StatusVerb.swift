import CommandLineKit
import DBus
import Glibc
import PropBus

/// `propctl status`: whether propbusd runs on the selected bus, its version and size.
enum StatusVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let client = try await PropbusClient.connect(parsed)
        let owner: String
        do {
            owner = try await client.connection.callBus("GetNameOwner", [.string(PropbusClient.busName)]).first?.stringValue ?? ""
        } catch {
            // A bus that starts the daemon on the first call (D-Bus activation) has it, in
            // effect: say so, and start nothing, as `systemctl status` starts nothing.
            let activatable = (try? await client.connection.callBus("ListActivatableNames", []))?.first
                .map { if case .array(_, let names) = $0 { names.contains(.string(PropbusClient.busName)) } else { false } } ?? false
            // One message: the JSON document for scripts, or the line for people.
            if parsed.flag("json") {
                Output.line(Output.json(.object([("running", .bool(false)), ("activatable", .bool(activatable))])))
                exit(activatable ? 0 : CommandFailure.ExitCode.unavailable.rawValue)
            }
            guard activatable else { throw CommandFailure.notRunning }
            Output.line("status  activatable: not running; this bus starts propbusd on the first call to \(PropbusClient.busName) (any propctl command but status)")
            return
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
        // An older propbusd has no ListUsage: then there is nothing to show.
        let usage = QuotaUsage.decode((try? await client.manager("ListUsage"))?.first)
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
                ("usage", QuotaUsage.json(usage)),
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
        if !usage.isEmpty {
            Output.line("")
            Output.line(QuotaUsage.table(usage))
        }
        // Last, after everything that could be shown: one line on stderr, and the exit status.
        if let hostsFailure { throw hostsFailure }
    }
}

/// `Manager.ListUsage`: each uid's usage of each quota, against its limit (`nil`: none).
enum QuotaUsage {
    typealias Row = (uid: UInt32, quotas: [(name: String, used: UInt64, limit: UInt64?)])

    static func decode(_ value: DBusValue?) -> [Row] {
        guard case .array(_, let rows)? = value else { return [] }
        return rows.compactMap { row -> Row? in
            guard case .structure(let fields) = row, fields.count == 2, case .uint32(let uid) = fields[0],
                  case .dictionary(_, _, let entries) = fields[1] else { return nil }
            let quotas = entries.compactMap { entry -> (name: String, used: UInt64, limit: UInt64?)? in
                guard let name = entry.key.stringValue, case .structure(let pair) = entry.value, pair.count == 2,
                      case .uint64(let used) = pair[0], case .uint64(let limit) = pair[1] else { return nil }
                // UINT64_MAX: no quota (root, the daemon's user, or no access control).
                return (name, used, limit == .max ? nil : limit)
            }
            return (uid, quotas.sorted { $0.name < $1.name })
        }
    }

    static func json(_ rows: [Row]) -> JSONValue {
        .array(rows.map { row in
            .object([("uid", .unsignedInteger(UInt64(row.uid))), ("quotas", .object(row.quotas.map { quota in
                (quota.name, .object([("used", .unsignedInteger(quota.used)), ("limit", quota.limit.map { .unsignedInteger($0) } ?? .null)]))
            }))])
        })
    }

    /// One line per uid, a column per quota: "USED/LIMIT", or "USED" when it has none.
    static func table(_ rows: [Row]) -> String {
        let names = rows.first?.quotas.map(\.name) ?? []
        return Output.table(header: ["UID"] + names.map { $0.uppercased() }, rows: rows.map { row in
            [String(row.uid)] + row.quotas.map { quota in quota.limit.map { "\(quota.used)/\($0)" } ?? String(quota.used) }
        })
    }
}
