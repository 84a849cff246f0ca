import DBus
import PropBus
import SystemKit

/// Layer files an import writes (docs/layers.md): one JSON object of `{"value": V}` entries,
/// replaced whole and atomically, so the daemon never reads half of one and a concurrent
/// writer's file is not mixed into it.
enum LayerFileWriter {
    /// propbusd's `--config-dir` (`Manager.ConfigDirectory`).
    static func configDirectory(_ client: PropbusClient, verb: String) async throws(CommandFailure) -> String {
        let reply = try? await client.call(Key.rootPath, PropbusClient.propertiesInterface, "Get",
                                           [.string(PropbusClient.managerInterface), .string("ConfigDirectory")])
        guard let directory = reply?.first?.unwrappingVariantOnce.stringValue, !directory.isEmpty else {
            throw CommandFailure(.dbusError, "propctl \(verb): this propbusd has no configuration directory (--config-dir) to write layer files into")
        }
        return directory
    }

    /// The file's text: each key's value in the long form, `{"value": V}`, which no a{sv}
    /// value can be mistaken for.
    static func text(_ entries: [(key: String, value: DBusValue)]) -> String {
        JSONValue.object(entries.map { ($0.key, JSONValue.object([("value", ValueText.jsonValue($0.value))])) }).serialized(pretty: true) + "\n"
    }

    /// Writes `text` to `path` whole (``DurableFile``: a temporary file of its own beside it,
    /// synced, renamed over it, the directory synced).
    static func write(_ text: String, to path: String, verb: String) throws(CommandFailure) {
        let folder = FileSystem.directory(of: path)
        do throws(Errno) {
            try FileSystem.createDirectories(folder, mode: 0o755)
            try DurableFile.replace(path, with: Array(text.utf8), mode: 0o644)
        } catch {
            throw CommandFailure(.dbusError, "propctl \(verb): cannot write \(path): \(error); layer files need write access to \(folder) (run as root)")
        }
    }
}
