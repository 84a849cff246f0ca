import CommandLineKit
import DBus
import PropBus

/// `propctl lock KEY|PREFIX VALUE [--for USER|@GROUP ...]` and `propctl unlock KEY|PREFIX`:
/// `Manager.Lock` and `Unlock`, which keep the administrator's locks in the daemon's
/// `mandatory.d/50-propctl.json` (written by the daemon, durably, and put in force at once). With
/// `--fleet`, the fleet's layer of a fleet key in etcd instead (`Manager.SetFleetLayer`,
/// `RemoveFleetLayer`): its mandatory value, or with `--default` its default.
enum LockVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let target = parsed.positional("KEY") ?? ""
        let client = try await PropbusClient.connect(parsed)
        if try FleetLayerVerb.isFleet(parsed, verb: "lock") {
            let type = try await FleetLayerVerb.type(of: target, client)
            let value: DBusValue
            do { value = try ValueText.parse(parsed.positional("VALUE") ?? "", as: type) } catch { throw .badValue(target, error) }
            _ = try await client.manager("SetFleetLayer", [.string(FleetLayerVerb.layer(parsed)), .string(target), .variant(value),
                                                           .array(of: .string, parsed.options("for").map { .string($0) })])
            return
        }
        let value: DBusValue
        let text = parsed.positional("VALUE") ?? ""
        if target.hasSuffix(".*") {
            // Every key under the prefix types it (the daemon checks it against each): JSON, or
            // a bare word as a string.
            let json = (try? JSONValue.parse(text)) ?? .string(text)
            do { value = try ValueText.value(from: json, as: .variant).unwrappingVariantOnce } catch { throw .badValue(target, error) }
        } else {
            let key = try PropbusClient.key(target)
            let type = try await client.type(of: key)
            do { value = try ValueText.parse(text, as: type) } catch { throw .badValue(key.text, error) }
        }
        _ = try await client.manager("Lock", [.string(target), .variant(value), .array(of: .string, parsed.options("for").map { .string($0) })])
    }
}

enum UnlockVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let client = try await PropbusClient.connect(parsed)
        if try FleetLayerVerb.isFleet(parsed, verb: "unlock") {
            _ = try await client.manager("RemoveFleetLayer", [.string(FleetLayerVerb.layer(parsed)), .string(parsed.positional("KEY") ?? "")])
            return
        }
        _ = try await client.manager("Unlock", [.string(parsed.positional("KEY") ?? "")])
    }
}

/// `--fleet` and `--default` of lock and unlock.
enum FleetLayerVerb {
    /// Whether the verb changes the fleet's layers; `--default` means nothing without `--fleet`
    /// (a site default is a `defaults.d` file).
    static func isFleet(_ parsed: ParsedCommand, verb: String) throws(CommandFailure) -> Bool {
        guard parsed.flag("fleet") else {
            if parsed.flag("default") {
                throw CommandFailure(.usage, "--default needs --fleet: a site default of a local key is a file of defaults.d under propbusd's --config-dir")
            }
            return false
        }
        if verb == "lock", parsed.flag("default"), !parsed.options("for").isEmpty {
            throw CommandFailure(.usage, "--default --fleet sets a default, which locks nobody: --for applies to locks only")
        }
        return true
    }

    /// The type a fleet layer's value of `target` is parsed as: the key's, or for a group prefix
    /// (`GROUP.*`) the one type of the group's fleet keys (the daemon checks it against each).
    static func type(of target: String, _ client: PropbusClient) async throws(CommandFailure) -> DBusType {
        guard target.hasSuffix(".*") else { return try await client.type(of: try PropbusClient.key(target)) }
        let group = String(target.dropLast(2))
        let types = Set(try await client.list(prefix: group)
            .filter { $0.key.hasPrefix(group + ".") && $0.metadata["scope"]?.unwrappingVariantOnce.stringValue == "fleet" }.map(\.type))
        guard types.count == 1, let signature = types.first else {
            throw CommandFailure(.usage, types.isEmpty
                ? "the group \(target) has no fleet key yet to type the value by; create one first"
                : "the fleet keys of the group \(target) have several types (\(types.sorted().joined(separator: ", "))): lock them one by one")
        }
        do { return try DBusType(parsing: signature) } catch {
            throw CommandFailure(.dbusError, "the daemon reported an invalid type '\(signature)' in \(target)")
        }
    }

    /// The fleet layer named: `mandatory`, or `defaults` with `--default`.
    static func layer(_ parsed: ParsedCommand) -> String { parsed.flag("default") ? "defaults" : "mandatory" }
}
