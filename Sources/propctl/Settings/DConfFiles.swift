import CommandLineKit
import GSettingsFormats
import PropBus
import SystemKit

/// `propctl import dconf [FILE|-] [--path DIR]`: a `dconf dump` file (or anything `dconf load`
/// reads) into propbus, in one Apply.
enum DConfImport {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let source = parsed.positional("SOURCE") ?? "-"
        let directory = parsed.option("path") ?? "/"
        guard directory.hasPrefix("/"), directory.hasSuffix("/"), !directory.contains("//") else {
            throw CommandFailure(.usage, "--path \(directory) is not a dconf directory: it starts and ends with '/', as /org/gnome/desktop/")
        }
        let text = try SettingsFiles.read(source)
        let values = try Self.values(text, source: source == "-" ? "standard input" : source, directory: directory)
        let client = try await PropbusClient.connect(parsed)
        let plan = try SettingsImportPlan(values, current: try await SettingsImportPlan.currentKeys(client))
        if parsed.flag("dry-run") {
            for line in plan.describe() { Output.line(line) }
            return
        }
        try await plan.execute(client)
        Output.error("propctl import: \(values.count) keys: \(plan.creations.count) created, \(plan.assignments.count) set, \(plan.unchanged) unchanged")
    }

    /// The values of a dconf key file, with paths relative to `directory` as `dconf load DIR`
    /// reads them (the group `/` is the directory itself).
    static func values(_ text: String, source: String, directory: String) throws(CommandFailure) -> [ImportedValue] {
        let file: KeyFile
        do { file = try KeyFile(parsing: text, source: source) } catch { throw CommandFailure(.usage, error.message) }
        var values: [ImportedValue] = []
        for group in file.groups {
            let prefix = group.name == "/" ? directory : directory + group.name + "/"
            for entry in group.entries {
                values.append(try ImportedValue(path: prefix + entry.key, text: entry.value, source: "\(source): [\(group.name)]"))
            }
        }
        return values
    }
}

/// `propctl export dconf [DIR]`: the values users set, as `dconf dump DIR` prints them (its
/// order: in each directory its keys, then its subdirectories, each sorted by their bytes).
enum DConfExport {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let directory = parsed.positional("DIR") ?? "/"
        guard directory.hasPrefix("/"), directory.hasSuffix("/"), !directory.contains("//") else {
            throw CommandFailure(.usage, "\(directory) is not a dconf directory: it starts and ends with '/', as /org/gnome/desktop/")
        }
        let group = directory == "/" ? "" : SettingsPaths.group(forSettingsDirectory: directory)
        guard let group else { throw CommandFailure(.usage, "\(directory) has no propbus group (docs/dconf.md)") }
        let client = try await PropbusClient.connect(parsed)
        let root = Directory()
        for item in try await client.list(prefix: group) where item.metadata["is_set"]?.boolValue ?? true {
            guard let path = SettingsPaths.settingsKey(forKey: item.key) else {
                Output.error("propctl export: \(item.key) has no dconf path (docs/dconf.md); left out")
                continue
            }
            guard path.hasPrefix(directory) else { continue }
            let value = DumpVerb.userValue(of: item)
            guard let gvariant = GVariantValue(dbus: value) else {
                Output.error("propctl export: \(item.key)'s value does not read as a GVariant; left out")
                continue
            }
            root.add(path.dropFirst(directory.count).split(separator: "/").map(String.init), GVariantText.print(gvariant))
        }
        var file = KeyFile()
        root.write(into: &file, group: "")
        Output.write(file.text, to: .standardOutput)
    }

    /// A dconf directory: its keys' printed values and its subdirectories.
    private final class Directory {
        var keys: [String: String] = [:]
        var subdirectories: [String: Directory] = [:]

        func add(_ components: [String], _ value: String) {
            guard components.count > 1 else {
                keys[components[0]] = value
                return
            }
            let child = subdirectories[components[0]] ?? Directory()
            subdirectories[components[0]] = child
            child.add(Array(components.dropFirst()), value)
        }

        func write(into file: inout KeyFile, group: String) {
            for key in keys.keys.sorted(by: { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }) {
                file.set(keys[key] ?? "", for: key, in: group.isEmpty ? "/" : group)
            }
            for name in subdirectories.keys.sorted(by: { Array(($0 + "/").utf8).lexicographicallyPrecedes(Array(($1 + "/").utf8)) }) {
                subdirectories[name]?.write(into: &file, group: group.isEmpty ? name : group + "/" + name)
            }
        }
    }
}

/// Reading the files imports come from.
enum SettingsFiles {
    /// `path`'s text, or standard input's for `-`.
    static func read(_ path: String) throws(CommandFailure) -> String {
        let bytes: [UInt8]
        if path == "-" {
            bytes = (try? FileDescriptor.standardInput.readToEnd()) ?? []
        } else {
            do { bytes = try FileSystem.contents(of: path) } catch { throw CommandFailure(.usage, "cannot read \(path): \(error)") }
        }
        guard let text = String(validating: bytes, as: UTF8.self) else { throw CommandFailure(.usage, "cannot read \(path): it is not UTF-8 text") }
        return text
    }
}
