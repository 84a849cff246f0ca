import CommandLineKit
import DBus
import PropBus

/// `propctl reload`: `Manager.Reload`; prints the model files it skipped and fails if any.
enum ReloadVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let client = try await PropbusClient.connect(parsed)
        let reply = try await client.manager("Reload", [])
        let skipped = SkippedFiles.decode(reply.first)
        if parsed.flag("json") {
            Output.line(Output.json(.object([("skipped", SkippedFiles.json(skipped))])))
        } else {
            for file in skipped { Output.error("propctl reload: skipped \(file.reason)") }
        }
        if !skipped.isEmpty {
            throw CommandFailure(.dbusError, "\(skipped.count) model file\(skipped.count == 1 ? " was" : "s were") skipped; the others were loaded")
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
