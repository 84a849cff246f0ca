import CommandLineKit
import DBus
import Glibc
import PropBus

/// `propctl prune [--yes]`: lists the stored values no definition claims (`ListUnclaimedPage`, page after page) and,
/// with `--yes` (or a "y" at the prompt on a terminal), deletes exactly those (`Prune`).
/// Otherwise nothing changes: deleting data is never the default.
enum PruneVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let client = try await PropbusClient.connect(parsed)
        // Page after page, each one fitting in a message; each page's keys are then pruned in
        // one call, whose reply fits as well.
        var pages: [[String]] = []
        var values: [(key: String, value: DBusValue)] = []
        var after = ""
        repeat {
            let reply = try await client.manager("ListUnclaimedPage", [.string(""), .string(after), .uint32(0)])
            guard reply.count == 2, case .array(_, let rows) = reply[0], let next = reply[1].stringValue else {
                throw CommandFailure(.dbusError, "propbusd answered ListUnclaimedPage with \(reply)")
            }
            var keys: [String] = []
            for case .structure(let fields) in rows where fields.count == 2 {
                if let key = fields[0].stringValue {
                    values.append((key, fields[1].unwrappingVariantOnce))
                    keys.append(key)
                }
            }
            pages.append(keys)
            after = next
        } while !after.isEmpty
        var confirmed = parsed.flag("yes")
        var shown = false
        if !confirmed, !values.isEmpty, !parsed.flag("json"), isatty(STDIN_FILENO) == 1, isatty(STDOUT_FILENO) == 1 {
            // At a terminal, ask, as `docker system prune` does; in scripts, --yes says it.
            Output.line(Output.table(header: ["KEY", "VALUE"], rows: values.map { [$0.key, ValueText.format($0.value)] }))
            Output.write("Delete these \(values.count) stored value\(values.count == 1 ? "" : "s")? [y/N] ", to: .standardOutput)
            let blank: (Character) -> Bool = { $0 == " " || $0 == "\t" }
            let answer = String((readLine() ?? "").drop(while: blank).reversed().drop(while: blank).reversed()).lowercased()
            guard answer == "y" || answer == "yes" else {
                Output.line("nothing deleted")
                return
            }
            confirmed = true
            shown = true
        }
        var deleted: [String] = []
        if confirmed {
            for keys in pages where !keys.isEmpty {
                let pruned = try await client.manager("Prune", [.array(of: .string, keys.map { .string($0) })])
                if case .array(_, let keys)? = pruned.first { deleted += keys.compactMap(\.stringValue) }
            }
        }
        if parsed.flag("json") {
            Output.line(Output.json(.object([
                ("unclaimed", .array(values.map { .object([("key", .string($0.key)), ("value", ValueText.jsonValue($0.value))]) })),
                ("deleted", .array(deleted.map { .string($0) })),
            ])))
            return
        }
        guard !values.isEmpty else {
            Output.line("no stored values without a definition")
            return
        }
        if !shown { Output.line(Output.table(header: ["KEY", "VALUE"], rows: values.map { [$0.key, ValueText.format($0.value)] })) }
        if confirmed {
            Output.line("deleted \(deleted.count) stored value\(deleted.count == 1 ? "" : "s")")
        } else {
            Output.line("\(values.count) stored value\(values.count == 1 ? "" : "s") without a definition; run 'propctl prune --yes' to delete \(values.count == 1 ? "it" : "them")")
        }
    }
}
