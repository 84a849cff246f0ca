import CommandLineKit
import DBus
import GSettingsFormats
import PropBus
import SystemKit

/// `propctl import gschema FILE|DIR [--vendor-dir DIR]`: a definition for every key of every
/// schema with a path, and the override files' values as the vendor layer.
enum GSchemaImport {
    /// The vendor layer's file that holds the override files' values.
    static let overridesFileName = "50-gschema-overrides.json"

    /// One key's definition, as `CreateProperty` takes it.
    struct Definition {
        var path: String
        var key: String
        var type: String
        var defaultValue: DBusValue
        var options: [String: DBusValue]
    }

    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        guard let source = parsed.positional("SOURCE") else {
            throw CommandFailure(.usage, "propctl import gschema needs a .gschema.xml file or a schema directory")
        }
        let (schemas, overrideFiles) = try read(source)
        var notes: [String] = []
        let overrides: [String: [String: GVariantValue]]
        do { overrides = try schemas.overrides(overrideFiles, skipped: &notes) } catch { throw CommandFailure.badValue(error.message) }
        var definitions: [Definition] = []
        var vendor: [(key: String, value: DBusValue)] = []
        for schema in schemas.schemas {
            guard let path = schema.path else {
                notes.append("\(schema.id): relocatable (no path); its keys are created by their first write through the GSettings backend")
                continue
            }
            for key in schema.keys {
                let definition = try Self.definition(key, path: path)
                definitions.append(definition)
                if let value = overrides[schema.id]?[key.name] {
                    do { vendor.append((definition.key, try value.dbusValue())) } catch {
                        throw CommandFailure.badValue("\(schema.id): override of \(key.name): \(error.message)")
                    }
                }
            }
        }
        let client = try await PropbusClient.connect(parsed)
        let current = try await SettingsImportPlan.currentKeys(client)
        var changed: [Definition] = []
        for definition in definitions {
            if let existing = current[definition.key] {
                guard existing.type == definition.type else {
                    throw CommandFailure(.dbusError, "\(PropBusError.Code.typeMismatch.dbusName): \(definition.path) (\(definition.key)) is '\(existing.type)' in propbusd, '\(definition.type)' in the schema; nothing was imported")
                }
                if isUnchanged(definition, existing) { continue }
            }
            changed.append(keepingAdministration(definition, current[definition.key]))
        }
        let vendorPath = (parsed.option("vendor-dir") ?? "/usr/share/propbus") + "/defaults.d/" + overridesFileName
        for note in notes { Output.error("propctl import: \(note)") }
        if parsed.flag("dry-run") {
            for definition in changed { Output.line("\(current[definition.key] == nil ? "define" : "redefine") \(definition.key) \(definition.type)") }
            for entry in vendor { Output.line("vendor \(entry.key) = \(ValueText.format(entry.value)) (\(vendorPath))") }
            Output.line("\(changed.count) to define, \(definitions.count - changed.count) unchanged, \(vendor.count) vendor values")
            return
        }
        for definition in changed {
            _ = try await client.manager("CreateProperty", [.string(definition.key), .string(definition.type),
                                                            .variant(definition.defaultValue), .vardict(definition.options)])
        }
        let vendorText = LayerFileWriter.text(vendor)
        let written = (try? FileSystem.contents(of: vendorPath)).map { String(decoding: $0, as: UTF8.self) }
        if !vendor.isEmpty, written != vendorText {
            try LayerFileWriter.write(vendorText, to: vendorPath, verb: "import")
            try await ReloadVerb.reload(client, json: false)
        }
        Output.error("propctl import: \(definitions.count) keys of \(schemas.schemas.count) schemas: \(changed.count) defined, \(vendor.count) vendor values")
    }

    /// The schemas of `source` (a file, or every `.gschema.xml` and `.enums.xml` of a
    /// directory) and the directory's override files, in name order.
    private static func read(_ source: String) throws(CommandFailure) -> (GSchemaSet, [(text: String, source: String)]) {
        var files = [source]
        if FileSystem.isDirectory(source) {
            let names: [String]
            do { names = try FileSystem.contentsOfDirectory(source).sorted() } catch { throw CommandFailure(.usage, "cannot read \(source): \(error)") }
            // Enums and flags may be declared in files of their own (glib-mkenums' .enums.xml).
            files = names.filter { $0.hasSuffix(".gschema.xml") || $0.hasSuffix(".enums.xml") || $0.hasSuffix(".gschema.override") }
                .map { source + "/" + $0 }
        }
        var texts: [(text: String, source: String)] = []
        for file in files { texts.append((try SettingsFiles.read(file), file)) }
        var schemas = GSchemaSet()
        let overrides = texts.filter { $0.source.hasSuffix(".gschema.override") }
        do throws(GVariantError) {
            for file in texts where !file.source.hasSuffix(".gschema.override") { try schemas.add(file.text, source: file.source) }
            try schemas.resolve()
        } catch {
            throw CommandFailure.badValue(error.message)
        }
        return (schemas, overrides)
    }

    private static func definition(_ key: GSchemaSet.Key, path: String) throws(CommandFailure) -> Definition {
        guard let name = SettingsPaths.key(forSettingsKey: path + key.name) else {
            throw CommandFailure.badValue("\(key.location): \(path)\(key.name) has no propbus key (docs/dconf.md)")
        }
        do {
            let type = try key.type.dbusType()
            var options: [String: DBusValue] = [:]
            if let text = key.summary ?? key.description, !text.isEmpty {
                options["description"] = .string(Self.truncated(text, toBytes: PropertyDefinition.maximumDescriptionLength))
            }
            if let range = key.range, type.isNumeric {
                options["minimum"] = try range.minimum.dbusValue()
                options["maximum"] = try range.maximum.dbusValue()
            }
            if let choices = key.choices, type == .string {
                options["choices"] = .array(of: .variant, choices.map { .variant(.string($0)) })
            }
            return Definition(path: path + key.name, key: name, type: type.signature, defaultValue: try key.defaultValue.dbusValue(), options: options)
        } catch {
            throw CommandFailure.badValue("\(key.location): key \(key.name): \(error.message)")
        }
    }

    /// Whether the daemon's definition already says what the schema says.
    private static func isUnchanged(_ definition: Definition, _ existing: ListedProperty) -> Bool {
        guard existing.metadata["default"] == definition.defaultValue else { return false }
        for name in ["description", "minimum", "maximum", "choices"] {
            let wanted = definition.options[name] ?? (name == "description" ? .string("") : nil)
            if existing.metadata[name] != wanted { return false }
        }
        return true
    }

    /// What the schema does not say is kept as it is (who may write, secrecy, persistence,
    /// the fleet's scope): registering again replaces the whole definition.
    private static func keepingAdministration(_ definition: Definition, _ existing: ListedProperty?) -> Definition {
        var definition = definition
        for name in ["writers", "secret", "persistent", "writable", "scope"] {
            if let value = existing?.metadata[name] { definition.options[name] = value }
        }
        return definition
    }

    /// `text` cut to at most `limit` UTF-8 bytes, at a character boundary.
    private static func truncated(_ text: String, toBytes limit: Int) -> String {
        guard text.utf8.count > limit else { return text }
        var result = ""
        for character in text {
            guard result.utf8.count + character.utf8.count <= limit - 3 else { break }
            result.append(character)
        }
        return result + "…"
    }
}
