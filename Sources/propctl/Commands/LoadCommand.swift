import DBus
import Foundation
import PropBus

/// `propctl load FILE`: checks a `dump` document against the daemon's types, then applies it
/// in one `Manager.Apply`, so it changes everything or nothing.
enum LoadCommand: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let path = parsed.positional("FILE") ?? "-"
        let text: String
        if path == "-" {
            text = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
        } else {
            do { text = try String(contentsOfFile: path, encoding: .utf8) } catch {
                throw CommandFailure(.usage, "cannot read \(path): \(error.localizedDescription)")
            }
        }
        let document: [JSONValue.Member]
        do {
            guard let members = try JSONValue.parse(text)["properties"]?.objectMembers else {
                throw CommandFailure(.usage, "\(path): expected {\"properties\": {KEY: {\"type\": …, \"value\": …}}}, as 'propctl dump' writes")
            }
            document = members
        } catch let error as CommandFailure {
            throw error
        } catch {
            throw CommandFailure(.usage, "\(path): invalid JSON: \(error)")
        }

        let client = try await PropbusClient.connect(parsed)
        let current = Dictionary(try await client.list(prefix: "").map { ($0.key, $0) }, uniquingKeysWith: { a, _ in a })
        var assignments: [DictionaryEntry] = []
        var resets: [DBusValue] = []
        for member in document {
            let key = member.key
            guard let existing = current[key] else {
                throw CommandFailure(.dbusError, "org.propbus.PropBus1.Error.UnknownKey: \(path): no property named \(key)")
            }
            guard member.value.objectMembers != nil, let value = member.value["value"] else {
                throw CommandFailure(.usage, "\(path): \(key): expected an object with \"type\" and \"value\"")
            }
            if let type = member.value["type"]?.stringValue, type != existing.type {
                throw CommandFailure(.dbusError, "org.propbus.PropBus1.Error.TypeMismatch: \(path): \(key) has type '\(existing.type)' in the daemon, '\(type)' in the file")
            }
            let wantsSet = member.value["is_set"]?.boolValue ?? true
            let isSet = existing.metadata["is_set"]?.boolValue ?? true
            if !wantsSet {
                if isSet { resets.append(.string(key)) }
                continue
            }
            let parsedValue: DBusValue
            do {
                parsedValue = try ValueText.value(from: value, as: DBusType(parsing: existing.type))
            } catch let error as ValueTextError {
                throw CommandFailure(.usage, "\(path): \(key): not a valid '\(existing.type)' value: \(error.message)")
            } catch {
                throw CommandFailure(.usage, "\(path): \(key): \(error)")
            }
            if parsedValue != existing.value || !isSet {
                assignments.append(DictionaryEntry(.string(key), .variant(parsedValue)))
            }
        }
        guard !assignments.isEmpty || !resets.isEmpty else { return }
        _ = try await client.manager("Apply", [.dictionary(key: .string, value: .variant, assignments), .array(of: .string, resets)])
        if parsed.flag("json") {
            Output.line(Output.json(.object([("set", .number(assignments.count)), ("reset", .number(resets.count))])))
        }
    }
}
