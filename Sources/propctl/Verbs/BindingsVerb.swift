import CommandLineKit
import DBus
import PropBus

/// `propctl bindings [PREFIX]`: `Manager.ListBindingsPage`, page after page (so any number of
/// bindings can be listed), as a table or JSON.
enum BindingsVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let client = try await PropbusClient.connect(parsed)
        let bindings = try await client.bindings(prefix: parsed.positional("PREFIX") ?? "").map { binding in
            (path: binding.path, key: binding.key, to: binding.to,
             options: binding.options.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
        }
        if parsed.flag("json") {
            Output.line(Output.json(.array(bindings.map { binding in
                .object([("path", .string(binding.path)), ("key", .string(binding.key)), ("to", .string(binding.to)),
                         ("options", .object(binding.options.map { ($0.0, ValueText.jsonValue($0.1)) }))])
            })))
            return
        }
        guard !bindings.isEmpty else { return }
        Output.line(Output.table(header: ["PATH", "KEY", "TO", "OPTIONS"], rows: bindings.map { binding in
            [binding.path, binding.key, binding.to, binding.options.map { "\($0.0)=\(shellQuoted(ValueText.format($0.1)))" }.joined(separator: " ")]
        }))
    }

    /// `text` as a shell word: as it is when it has no blank, quote or other special character,
    /// else in single quotes, so a transform's spaces and quotes read apart from the next option.
    static func shellQuoted(_ text: String) -> String {
        let plain = !text.isEmpty && text.unicodeScalars.allSatisfy { scalar in
            (scalar.value < 128 && (scalar.properties.isAlphabetic || ("0"..."9").contains(Character(scalar))))
                || "._/:@%+,-".unicodeScalars.contains(scalar)
        }
        return plain ? text : "'" + text.replacingAll("'", with: "'\\''") + "'"
    }
}
