import CommandLineKit
import DBus
import PropBus

/// `propctl reload`: `Manager.Reload`; prints the model files it skipped and fails if any.
enum ReloadVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        try await reload(try await PropbusClient.connect(parsed), json: parsed.flag("json"))
    }

    /// `Manager.Reload`; prints what was skipped (model files, layer-file entries) and fails if
    /// anything was (also after `propctl lock` and `unlock`).
    static func reload(_ client: PropbusClient, json: Bool) async throws(CommandFailure) {
        let reply = try await client.manager("Reload", [])
        let skipped = SkippedFiles.decode(reply.first)
        if json {
            Output.line(Output.json(.object([("skipped", SkippedFiles.json(skipped))])))
        } else {
            for file in skipped { Output.error("propctl reload: skipped \(file.reason)") }
        }
        if !skipped.isEmpty {
            throw CommandFailure(.dbusError, "\(skipped.count) model file\(skipped.count == 1 ? " or layer-file entry was" : "s or layer-file entries were") skipped; the others were loaded")
        }
    }
}

/// The `a(ss)` list of model files propbusd skipped (`Reload`, `SkippedModelFiles`).
enum SkippedFiles {
    static func decode(_ value: DBusValue?) -> [(path: String, reason: String)] {
        guard case .array(_, let rows)? = value?.unwrappingVariantOnce else { return [] }
        return rows.compactMap { row in
            guard case .structure(let fields) = row, fields.count == 2, let path = fields[0].stringValue,
                  let reason = fields[1].stringValue else { return nil }
            return (path, reason)
        }
    }

    static func json(_ files: [(path: String, reason: String)]) -> JSONValue {
        .array(files.map { .object([("path", .string($0.path)), ("reason", .string($0.reason))]) })
    }
}
