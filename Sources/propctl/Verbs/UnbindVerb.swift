import CommandLineKit
import DBus
import PropBus

/// `propctl unbind PATH`: `Manager.Unbind`; PATH may be just the binding's number.
enum UnbindVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let text = parsed.positional("PATH") ?? ""
        let path = text.allSatisfy(\.isNumber) && !text.isEmpty ? "\(Key.rootPath)/bindings/\(text)" : text
        guard ObjectPath.isValid(path) else {
            throw CommandFailure(.usage, "'\(text)' is not a binding path such as \(Key.rootPath)/bindings/3, nor a binding number")
        }
        let client = try await PropbusClient.connect(parsed)
        _ = try await client.manager("Unbind", [.objectPath(path)])
        if parsed.flag("json") { Output.line(Output.json(.object([("unbound", .string(path))]))) }
    }
}
