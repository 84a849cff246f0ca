import CommandLineKit
import DBus
import Glibc
import PropBus
import PropBusModelFiles
import SystemKit

/// `propctl lock KEY|PREFIX VALUE [--for USER|@GROUP ...]` and `propctl unlock KEY|PREFIX`: the
/// administrator's entries in propctl's own file of the daemon's `mandatory.d`
/// (``LayerFiles/managedFileName``), written atomically, then `Manager.Reload`. With `--fleet`,
/// the fleet's layer of a fleet key in etcd instead (`Manager.SetFleetLayer`, `RemoveFleetLayer`):
/// its mandatory value, or with `--default` its default.
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
        let value: JSONValue
        let text = parsed.positional("VALUE") ?? ""
        if target.hasSuffix(".*") {
            // Every key under the prefix types it: it stays JSON, a bare word a string.
            value = (try? JSONValue.parse(text)) ?? .string(text)
        } else {
            let key = try PropbusClient.key(target)
            let type = try await client.type(of: key)
            do { value = ValueText.jsonValue(try ValueText.parse(text, as: type)) } catch { throw .badValue(key.text, error) }
        }
        let names = parsed.options("for")
        try await LayerFileEditor.update(client, target: target, value: value, lockedFor: names.isEmpty ? nil : names, verb: "lock")
    }
}

enum UnlockVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let client = try await PropbusClient.connect(parsed)
        if try FleetLayerVerb.isFleet(parsed, verb: "unlock") {
            _ = try await client.manager("RemoveFleetLayer", [.string(FleetLayerVerb.layer(parsed)), .string(parsed.positional("KEY") ?? "")])
            return
        }
        try await LayerFileEditor.update(client, target: parsed.positional("KEY") ?? "", value: nil, lockedFor: nil, verb: "unlock")
    }
}

/// `--fleet` and `--default` of lock and unlock.
enum FleetLayerVerb {
    /// Whether the verb changes the fleet's layers; `--default` means nothing without `--fleet`
    /// (a site default is a `defaults.d` file).
    static func isFleet(_ parsed: ParsedCommand, verb: String) throws(CommandFailure) -> Bool {
        guard parsed.flag("fleet") else {
            if parsed.flag("default") {
                throw CommandFailure(.usage, "propctl \(verb) --default needs --fleet: a site default of a local key is a file of defaults.d under propbusd's --config-dir")
            }
            return false
        }
        if verb == "lock", parsed.flag("default"), !parsed.options("for").isEmpty {
            throw CommandFailure(.usage, "propctl lock --default --fleet sets a default, which locks nobody: --for applies to locks only")
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
                ? "propctl lock \(target) --fleet: the group has no fleet key yet to type the value by; create one first"
                : "propctl lock \(target) --fleet: the group's fleet keys have several types (\(types.sorted().joined(separator: ", "))): lock them one by one")
        }
        do { return try DBusType(parsing: signature) } catch {
            throw CommandFailure(.dbusError, "the daemon reported an invalid type '\(signature)' in \(target)")
        }
    }

    /// The fleet layer named: `mandatory`, or `defaults` with `--default`.
    static func layer(_ parsed: ParsedCommand) -> String { parsed.flag("default") ? "defaults" : "mandatory" }
}

/// Edits propctl's file of `mandatory.d` under the daemon's `--config-dir` (`Manager.ConfigDirectory`).
enum LayerFileEditor {
    static func update(_ client: PropbusClient, target: String, value: JSONValue?, lockedFor: [String]?, verb: String) async throws(CommandFailure) {
        let reply = try? await client.call(Key.rootPath, PropbusClient.propertiesInterface, "Get",
                                           [.string(PropbusClient.managerInterface), .string("ConfigDirectory")])
        guard let directory = reply?.first?.unwrappingVariantOnce.stringValue, !directory.isEmpty else {
            throw CommandFailure(.dbusError, "propctl \(verb): this propbusd has no configuration directory (--config-dir) to write locks into")
        }
        let folder = directory + "/mandatory.d", path = folder + "/" + LayerFiles.managedFileName
        let current = (try? FileSystem.contents(of: path)).map { String(decoding: $0, as: UTF8.self) }
        if value == nil, current == nil {
            throw CommandFailure(.dbusError, "propctl unlock: \(target) is not locked by propctl (\(path) does not exist); other files of \(folder) are edited by hand")
        }
        let text: String
        do { text = try LayerFiles.managedText(current, setting: target, to: value, lockedFor: lockedFor) } catch {
            throw CommandFailure(.dbusError, "propctl \(verb): \(path) \(error.problem)")
        }
        do throws(Errno) {
            try FileSystem.createDirectories(folder, mode: 0o755)
            // Written beside it and renamed: the daemon never reads half a file.
            let temporary = path + ".tmp"
            let file = try FileDescriptor.open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode: 0o644)
            do throws(Errno) {
                try file.writeAll(text)
                try file.close()
            } catch {
                try? file.close()
                throw error
            }
            try FileSystem.rename(temporary, to: path)
        } catch {
            throw CommandFailure(.dbusError, "propctl \(verb): cannot write \(path): \(error); locks need write access to \(folder) (run as root)")
        }
        try await ReloadVerb.reload(client, json: false)
    }
}
