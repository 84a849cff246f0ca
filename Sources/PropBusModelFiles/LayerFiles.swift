import Glibc
import PropBus
import SystemKit

/// Reads the layer files (docs/layers.md) into a ``LayerFileSet`` for the model: the
/// administrator's `mandatory.d/` and `defaults.d/` under the configuration directory, the
/// distribution's `defaults.d/` under the vendor directory; in each, the `*.json` files in name
/// order.
///
/// A file is one JSON object: a key, or a group prefix written `"GROUP.*"`, to a value
/// (`{"settings.volume": 30, "ui.*": 12}`); an entry may be written `{"value": V}`, and in
/// `mandatory.d` `{"value": V, "for": ["alice", "@students"]}`. The values stay JSON: the model
/// types them against each key's definition when the key exists.
public enum LayerFiles {
    /// `propbusd --config-dir`'s default.
    public static let defaultConfigDirectory = "/etc/propbus"
    /// `propbusd --vendor-dir`'s default.
    public static let defaultVendorDirectory = "/usr/share/propbus"
    /// The file of `mandatory.d` that `propctl lock` and `unlock` manage.
    public static let managedFileName = "50-propctl.json"
    /// A larger file is refused unread (as a model file is, by default).
    public static let maximumFileSize = ModelFile.defaultMaximumSize

    /// The directories read, top-down, with their layer.
    public static func directories(configDirectory: String, vendorDirectory: String) -> [(layer: ValueLayer, directory: String)] {
        [(.mandatory, configDirectory + "/mandatory.d"), (.site, configDirectory + "/defaults.d"), (.vendor, vendorDirectory + "/defaults.d")]
    }

    /// Reads every layer file; a missing directory gives nothing, a bad file or entry a problem.
    public static func read(configDirectory: String, vendorDirectory: String) -> LayerFileSet {
        var set = LayerFileSet()
        for (layer, directory) in directories(configDirectory: configDirectory, vendorDirectory: vendorDirectory) {
            for path in ModelFile.files(in: directory) {
                let bytes: [UInt8]
                do { bytes = try FileSystem.regularFileContents(of: path, maximumSize: maximumFileSize) } catch {
                    // Gone between the listing and the read: it gives nothing, as if never there.
                    if case .system(let errno) = error, errno.rawValue == ENOENT { continue }
                    set.problems.append(LayerProblem(file: path, problem: "cannot be read: \(error); the file is skipped"))
                    continue
                }
                let parsed = parse(String(decoding: bytes, as: UTF8.self), path: path, layer: layer)
                set.entries += parsed.entries
                set.problems += parsed.problems
            }
        }
        return set
    }

    /// The entries of one file's text: group prefixes first, then keys, each in the file's order,
    /// so that a key named in the same file as its group's prefix takes its own value.
    public static func parse(_ text: String, path: String, layer: ValueLayer) -> (entries: [LayerEntry], problems: [LayerProblem]) {
        let json: JSONValue
        do { json = try JSONValue.parse(text) } catch {
            let (line, column) = ModelFile.lineAndColumn(ofByte: error.offset, in: text)
            return ([], [LayerProblem(file: path, problem: "line \(line), column \(column): \(error.reason); the file is skipped")])
        }
        // Before any entry is read: a NUL in a key, a "for" name or a value cannot go on the bus
        // (a problem quoting it broke SkippedModelFiles and Reload's reply for everyone) and cut
        // a name short where C reads it, as in model files.
        if let place = ModelFile.pathOfStringWithNUL(in: json) {
            let (line, column) = ModelFile.lineAndColumnOfNULEscape(in: text)
            return ([], [LayerProblem(file: path, problem: "line \(line), column \(column): \(place.isEmpty ? "a string" : place) holds a NUL character (\\u0000), which D-Bus strings cannot carry; the file is skipped")])
        }
        guard let members = json.objectMembers else {
            return ([], [LayerProblem(file: path, problem: "expected an object of keys to values, such as {\"settings.volume\": 30}; the file is skipped")])
        }
        var prefixes: [LayerEntry] = [], keys: [LayerEntry] = []
        var problems: [LayerProblem] = []
        for member in members {
            let name = member.key
            let target: LayerEntry.Target
            if name.hasSuffix(".*") {
                let group = String(name.dropLast(2))
                guard (try? Key(group + ".x")) != nil else {
                    problems.append(LayerProblem(file: path, key: name, problem: "a prefix must be a group name followed by .* (\"settings.*\"); this entry is skipped"))
                    continue
                }
                target = .prefix(group + ".")
            } else {
                do { target = .key(try Key(name)) } catch {
                    problems.append(LayerProblem(file: path, key: name, problem: error.message + " (a key is GROUP.NAME, a prefix GROUP.*); this entry is skipped"))
                    continue
                }
            }
            var value = member.value
            var lockedFor: [String]?
            // The long form: an object of exactly "value" (and, for locks, "for").
            if let fields = value.objectMembers, fields.contains(where: { $0.key == "value" }),
               fields.allSatisfy({ $0.key == "value" || $0.key == "for" }) {
                value = value["value"]!
                if let names = fields.first(where: { $0.key == "for" })?.value {
                    guard layer == .mandatory else {
                        problems.append(LayerProblem(file: path, key: name, problem: "\"for\" belongs in mandatory.d only: a default is nobody's lock; this entry is skipped"))
                        continue
                    }
                    guard let items = names.arrayValue, !items.isEmpty, items.allSatisfy({ ($0.stringValue ?? "").isEmpty == false }) else {
                        problems.append(LayerProblem(file: path, key: name, problem: "\"for\" must be a non-empty array of user names and @groups, such as [\"alice\", \"@students\"]; this entry is skipped"))
                        continue
                    }
                    lockedFor = items.compactMap(\.stringValue)
                }
            }
            let entry = LayerEntry(layer: layer, target: target, value: value, lockedFor: lockedFor, source: path)
            if case .prefix = target { prefixes.append(entry) } else { keys.append(entry) }
        }
        return (prefixes + keys, problems)
    }

    // MARK: The managed file

    /// The text of `propctl lock`'s file with `target` locked to `value` (`for` as given), or
    /// unlocked (`value` `nil`), from the file's current text (`nil`: none yet). Entries are
    /// kept in the file's order, a new one last.
    public static func managedText(_ current: String?, setting target: String, to value: JSONValue?, lockedFor: [String]?) throws(LayerProblem) -> String {
        var members: [JSONValue.Member] = []
        if let current, !current.isEmpty {
            let parsed: JSONValue
            do { parsed = try JSONValue.parse(current) } catch {
                throw LayerProblem(file: managedFileName, problem: "\(error); fix or remove it first")
            }
            guard let existing = parsed.objectMembers else {
                throw LayerProblem(file: managedFileName, problem: "is not a JSON object; fix or remove it first")
            }
            members = existing
        }
        if let value {
            let entry: JSONValue = lockedFor.map { .object([("value", value), ("for", .array($0.map { .string($0) }))]) } ?? value
            if let index = members.firstIndex(where: { $0.key == target }) {
                members[index].value = entry
            } else {
                members.append(JSONValue.Member(target, entry))
            }
        } else {
            members.removeAll { $0.key == target }
        }
        return JSONValue.object(members.map { ($0.key, $0.value) }).serialized(pretty: true) + "\n"
    }
}

extension LayerProblem: Error {}
