import DBus
import GSettingsFormats
import PropBus

/// One value of a dconf file: its dconf path (for messages), its key and its value in D-Bus form.
struct ImportedValue {
    var path: String
    var key: String
    var value: DBusValue

    /// The value of dconf path `path` written as GVariant `text` (`source` names the file and
    /// group in errors): typed as its text says, in D-Bus form, under its propbus key.
    init(path: String, text: String, source: String) throws(CommandFailure) {
        guard let key = SettingsPaths.key(forSettingsKey: path) else {
            throw CommandFailure.badValue("\(source): \(path) has no propbus key: dconf paths start with '/', have no empty segment, hold a directory and a name, and map to at most 255 bytes (docs/dconf.md)")
        }
        do {
            value = try GVariantText.parse(text).dbusValue(schemaless: true)
        } catch {
            throw CommandFailure.badValue("\(source): \(path): \(error.message): \(text)")
        }
        self.path = path
        self.key = key
    }
}

/// What importing values changes, worked out against the daemon's keys before anything is
/// written: keys to create (typed by their value), values to set, and how many are already so.
///
/// A value equal to what a key reads while the user has none (its default) changes nothing when
/// set, so the daemon keeps it unset; dconf keeps it as the user's. Such a value is stored by
/// registering the key again with its own definition and the value as `value` (set only when
/// none is stored): what anyone reads does not change, the value is the user's from then on.
struct SettingsImportPlan {
    /// A key registered again with its definition and a value to store.
    struct Keep {
        var key: String
        var type: String
        var defaultValue: DBusValue
        var options: [String: DBusValue]
    }

    var creations: [(key: String, type: String)] = []
    var assignments: [(key: String, old: DBusValue?, new: DBusValue)] = []
    var keeps: [Keep] = []
    var unchanged = 0

    /// Plans `values` against `current` (every key, as listed); a key the daemon has with
    /// another type is an error naming its path and both types, before anything changes.
    init(_ values: [ImportedValue], current: [String: ListedProperty]) throws(CommandFailure) {
        for item in values {
            guard let existing = current[item.key] else {
                creations.append((item.key, item.value.signature))
                let zero = item.value.type.zeroValue
                if item.value == zero {
                    keeps.append(Keep(key: item.key, type: item.value.signature, defaultValue: zero, options: ["value": item.value]))
                } else {
                    assignments.append((item.key, nil, item.value))
                }
                continue
            }
            guard existing.type == item.value.signature else {
                throw CommandFailure(.dbusError, "\(PropBusError.Code.typeMismatch.dbusName): \(item.path) (\(item.key)) is '\(existing.type)' in propbusd, '\(item.value.signature)' in the file; nothing was imported")
            }
            // Against the user's value: a lock or an override showing the same value hides
            // another one.
            let isSet = existing.metadata["is_set"]?.boolValue ?? true
            if isSet, DumpVerb.userValue(of: existing) == item.value {
                unchanged += 1
            } else if !isSet, existing.value == item.value {
                keeps.append(Keep(key: item.key, type: existing.type, defaultValue: existing.metadata["default"] ?? existing.value,
                                  options: Self.definitionOptions(existing).merging(["value": item.value]) { $1 }))
            } else {
                assignments.append((item.key, isSet ? DumpVerb.userValue(of: existing) : existing.value, item.value))
            }
        }
    }

    /// The options that register `item` again as it is defined.
    static func definitionOptions(_ item: ListedProperty) -> [String: DBusValue] {
        var options: [String: DBusValue] = [:]
        for name in LoadVerb.definitionOptions + ["scope"] where name != "default" {
            if let value = item.metadata[name] { options[name] = value }
        }
        return options
    }

    /// The plan, one line per key, and a count: what `--dry-run` prints.
    func describe() -> [String] {
        creations.map { "create \($0.key) \($0.type)" }
            + assignments.map { item in "set \(item.key) \(item.old.map(ValueText.format) ?? "(new)") -> \(ValueText.format(item.new))" }
            + keeps.map { "keep \($0.key) \(ValueText.format($0.options["value"] ?? $0.defaultValue)) (its default, stored as the user's)" }
            + ["\(creations.count) to create, \(assignments.count + keeps.count) to set, \(unchanged) unchanged"]
    }

    /// Creates the missing keys (with their type's zero as default: the file says no default),
    /// sets every value in one `Manager.Apply`, then stores the values equal to their key's
    /// default (``Keep``). If the Apply is refused, the keys created for it are deleted again
    /// and nothing is left changed.
    func execute(_ client: PropbusClient) async throws(CommandFailure) {
        var created: [String] = []
        do throws(CommandFailure) {
            for creation in creations {
                let type: DBusType
                do { type = try DBusType(parsing: creation.type) } catch { throw CommandFailure(.dbusError, "invalid type \(creation.type)") }
                _ = try await client.manager("CreateProperty", [.string(creation.key), .string(creation.type), .variant(type.zeroValue), .vardict([:])])
                created.append(creation.key)
            }
            if !assignments.isEmpty {
                let entries = assignments.map { DictionaryEntry(.string($0.key), .variant($0.new)) }
                _ = try await client.manager("Apply", [.dictionary(key: .string, value: .variant, entries), .array(of: .string, [])])
            }
        } catch {
            for key in created.reversed() { _ = try? await client.manager("DeleteProperty", [.string(key)]) }
            throw error
        }
        for keep in keeps {
            _ = try await client.manager("CreateProperty", [.string(keep.key), .string(keep.type), .variant(keep.defaultValue), .vardict(keep.options)])
        }
    }

    /// The daemon's keys by name.
    static func currentKeys(_ client: PropbusClient) async throws(CommandFailure) -> [String: ListedProperty] {
        Dictionary(try await client.list(prefix: "").map { ($0.key, $0) }, uniquingKeysWith: { first, _ in first })
    }
}
