import CommandLineKit
import DBus
import GSettingsFormats
import PropBus
import SystemKit

/// `propctl import dconf-db DIR`: dconf's `/etc/dconf/db/NAME.d/` as layer files: its key files
/// as site defaults, its `locks/` as mandatory entries (docs/dconf.md).
enum DConfDatabaseImport {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        guard let source = parsed.positional("SOURCE"), FileSystem.isDirectory(source) else {
            throw CommandFailure(.usage, "propctl import dconf-db needs a dconf database directory, such as /etc/dconf/db/local.d")
        }
        let directory = source.hasSuffix("/") ? String(source.dropLast()) : source
        var name = FileSystem.lastComponent(of: directory)
        if name.hasSuffix(".d") { name = String(name.dropLast(2)) }
        let (values, locks) = try read(directory)
        let client = try await PropbusClient.connect(parsed)
        let current = try await SettingsImportPlan.currentKeys(client)

        // Every key must keep its type; missing keys are created, so the files apply at once.
        var creations: [(key: String, type: String)] = []
        for item in values {
            if let existing = current[item.key] {
                guard existing.type == item.value.signature else {
                    throw CommandFailure(.dbusError, "\(PropBusError.Code.typeMismatch.dbusName): \(item.path) (\(item.key)) is '\(existing.type)' in propbusd, '\(item.value.signature)' in \(directory); nothing was imported")
                }
            } else if !creations.contains(where: { $0.key == item.key }) {
                creations.append((item.key, item.value.signature))
            }
        }
        let byKey = Dictionary(values.map { ($0.key, $0.value) }, uniquingKeysWith: { _, last in last })
        var mandatory: [(key: String, value: DBusValue)] = []
        for lock in locks {
            for key in lockedKeys(lock, values: values, current: current) {
                guard let value = byKey[key] ?? defaultOfExisting(current[key]) else {
                    throw CommandFailure(.dbusError, "\(PropBusError.Code.unknownKey.dbusName): \(directory)/locks locks \(lock), which the database gives no value and propbusd has no key of; import its schema first (propctl import gschema)")
                }
                if !mandatory.contains(where: { $0.key == key }) { mandatory.append((key, value)) }
            }
        }
        let site = orderedUnique(values).filter { entry in !mandatory.contains { $0.key == entry.key } }

        let config = try await LayerFileWriter.configDirectory(client, verb: "import")
        let sitePath = config + "/defaults.d/50-dconf-\(name).json", mandatoryPath = config + "/mandatory.d/50-dconf-\(name).json"
        if parsed.flag("dry-run") {
            for creation in creations { Output.line("create \(creation.key) \(creation.type)") }
            for entry in site { Output.line("site \(entry.key) = \(ValueText.format(entry.value)) (\(sitePath))") }
            for entry in mandatory { Output.line("lock \(entry.key) = \(ValueText.format(entry.value)) (\(mandatoryPath))") }
            return
        }
        for creation in creations {
            let type: DBusType
            do { type = try DBusType(parsing: creation.type) } catch { throw CommandFailure(.dbusError, "invalid type \(creation.type)") }
            _ = try await client.manager("CreateProperty", [.string(creation.key), .string(creation.type), .variant(type.zeroValue), .vardict([:])])
        }
        try LayerFileWriter.write(LayerFileWriter.text(site), to: sitePath, verb: "import")
        if mandatory.isEmpty {
            try? DurableFile.remove(mandatoryPath)
        } else {
            try LayerFileWriter.write(LayerFileWriter.text(mandatory), to: mandatoryPath, verb: "import")
        }
        try await ReloadVerb.reload(client, json: false)
        Output.error("propctl import: \(site.count) site defaults in \(sitePath), \(mandatory.count) locks in \(mandatoryPath), \(creations.count) keys created")
    }

    /// The database's values (its key files in name order, a later one winning) and its lock
    /// lines (`locks/*`: one dconf key or directory a line, `#` comments).
    private static func read(_ directory: String) throws(CommandFailure) -> ([ImportedValue], [String]) {
        func names(_ folder: String) throws(CommandFailure) -> [String] {
            do { return try FileSystem.contentsOfDirectory(folder).filter { !$0.hasPrefix(".") }.sorted() } catch {
                throw CommandFailure(.usage, "cannot read \(folder): \(error)")
            }
        }
        var values: [ImportedValue] = []
        for file in try names(directory) where !FileSystem.isDirectory(directory + "/" + file) {
            let path = directory + "/" + file
            values += try DConfImport.values(try SettingsFiles.read(path), source: path, directory: "/")
        }
        var locks: [String] = []
        if FileSystem.isDirectory(directory + "/locks") {
            for file in try names(directory + "/locks") {
                let path = directory + "/locks/" + file
                for line in try SettingsFiles.read(path).split(separator: "\n") {
                    let text = line.trimmingBlanks
                    guard !text.isEmpty, !text.hasPrefix("#") else { continue }
                    guard text.hasPrefix("/"), !text.contains("//") else { throw CommandFailure(.usage, "\(path): \(text) is not a dconf key or directory") }
                    locks.append(text)
                }
            }
        }
        return (values, locks)
    }

    /// The keys a lock line names: a key; for a directory (ending in `/`) every key below it the
    /// database or propbusd has.
    private static func lockedKeys(_ lock: String, values: [ImportedValue], current: [String: ListedProperty]) -> [String] {
        guard lock.hasSuffix("/") else { return SettingsPaths.key(forSettingsKey: lock).map { [$0] } ?? [] }
        let below = values.filter { $0.path.hasPrefix(lock) }.map(\.key)
        guard let group = SettingsPaths.group(forSettingsDirectory: lock) else { return below }
        return below + current.keys.filter { $0.hasPrefix(group + ".") }.sorted()
    }

    /// What a key reads with no user value: its layered default when it shows, else its
    /// definition's default.
    private static func defaultOfExisting(_ item: ListedProperty?) -> DBusValue? {
        guard let item else { return nil }
        if item.metadata["is_set"]?.boolValue == false { return item.value }
        return item.metadata["default"]
    }

    /// The values with one entry per key, the last one's, in first-seen order.
    private static func orderedUnique(_ values: [ImportedValue]) -> [(key: String, value: DBusValue)] {
        var order: [String] = []
        var latest: [String: DBusValue] = [:]
        for item in values {
            if latest[item.key] == nil { order.append(item.key) }
            latest[item.key] = item.value
        }
        return order.map { ($0, latest[$0]!) }
    }
}

extension Substring {
    /// Without leading and trailing blanks (spaces, tabs, carriage returns).
    var trimmingBlanks: String {
        String(drop { $0 == " " || $0 == "\t" || $0 == "\r" }.reversed().drop { $0 == " " || $0 == "\t" || $0 == "\r" }.reversed())
    }
}
