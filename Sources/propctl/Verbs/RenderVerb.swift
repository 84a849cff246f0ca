import CommandLineKit
import DBus
import PropBus
import SystemKit

/// `propctl render list|show|preview|run [NAME]`: the Manager's `ListRenders`, `GetRender`,
/// `PreviewRender` and `RunRender`.
enum RenderVerb: Subcommand {
    static let actions = ["list", "show", "preview", "run"]

    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let action = parsed.positional("ACTION") ?? ""
        guard actions.contains(action) else {
            throw CommandFailure(.usage, "unknown action '\(action)'; expected \(actions.joined(separator: ", "))")
        }
        let name = parsed.positional("NAME")
        if action == "list" {
            guard name == nil else { throw CommandFailure(.usage, "render list takes no NAME") }
        } else if name == nil {
            throw CommandFailure(.usage, "render \(action) needs the NAME of a render (propctl render list shows them)")
        }
        let client = try await PropbusClient.connect(parsed)
        let json = parsed.flag("json")
        switch action {
        case "list": try await list(client, json: json)
        case "show": try await show(client, name ?? "", json: json)
        case "preview": try await preview(client, name ?? "", json: json)
        default: try await runNow(client, name ?? "", json: json)
        }
    }

    private static func list(_ client: PropbusClient, json: Bool) async throws(CommandFailure) {
        let reply = try await client.manager("ListRenders")
        guard case .array(_, let rows)? = reply.first else { throw CommandFailure(.dbusError, "ListRenders replied \(reply)") }
        let renders: [(name: String, fields: [String: DBusValue])] = rows.compactMap { row in
            guard case .structure(let parts) = row, parts.count == 2, let name = parts[0].stringValue,
                  let fields = parts[1].stringKeyedEntries else { return nil }
            return (name, fields.mapValues(\.unwrappingVariantOnce))
        }
        if json {
            Output.line(Output.json(.array(renders.map { object(name: $0.name, $0.fields) })))
            return
        }
        guard !renders.isEmpty else { return }
        Output.line(Output.table(header: ["NAME", "STATE", "DESTINATION", "REVISION", "MESSAGE"], rows: renders.map { render in
            [render.name, text(render.fields["state"]), text(render.fields["destination"]), text(render.fields["revision"]),
             Output.escaped(text(render.fields["message"]))]
        }))
    }

    private static func show(_ client: PropbusClient, _ name: String, json: Bool) async throws(CommandFailure) {
        let reply = try await client.manager("GetRender", [.string(name)])
        guard let fields = reply.first?.stringKeyedEntries?.mapValues(\.unwrappingVariantOnce) else {
            throw CommandFailure(.dbusError, "GetRender replied \(reply)")
        }
        if json { return Output.line(Output.json(object(name: name, fields))) }
        var lines = ["name: \(name)"]
        for field in ["state", "message", "revision", "destination", "owner", "group", "mode", "template", "check", "reload",
                      "wait_min", "wait_max", "require", "escape", "timeout", "reads", "walks", "source", "description", "last_run"] {
            guard let value = fields[field] else { continue }
            var shown: String
            switch field {
            case "check", "reload", "require", "reads", "walks":
                shown = value.arrayOfStrings.joined(separator: field == "check" || field == "reload" ? " " : ", ")
            case "owner", "group":
                shown = text(value).isEmpty ? "(propbusd's \(field == "owner" ? "user" : "primary group"))" : text(value)
            case "template":
                shown = text(value).isEmpty ? "(template_text)" : text(value)
            case "last_run":
                guard case .uint64(let microseconds) = value else { continue }
                shown = WallClockTime(seconds: Int(microseconds / 1_000_000), nanoseconds: Int(microseconds % 1_000_000) * 1000).iso8601
            default:
                shown = text(value)
            }
            if shown.isEmpty, field == "check" || field == "reload" { shown = "(none)" }
            lines.append("\(field.replacingAll("_", with: " ")): \(Output.escaped(shown))")
        }
        Output.line(lines.joined(separator: "\n"))
    }

    private static func preview(_ client: PropbusClient, _ name: String, json: Bool) async throws(CommandFailure) {
        let reply = try await client.manager("PreviewRender", [.string(name)])
        guard reply.count == 4, let state = reply[0].stringValue, let message = reply[1].stringValue,
              case .bytes(let content) = reply[2], case .boolean(let masked) = reply[3] else {
            throw CommandFailure(.dbusError, "PreviewRender replied \(reply)")
        }
        if json {
            Output.line(Output.json(.object([("name", .string(name)), ("state", .string(state)), ("message", .string(message)),
                                             ("content", .string(String(decoding: content, as: UTF8.self))), ("masked", .bool(masked))])))
        } else {
            // Exactly the bytes the file would hold: no newline added.
            try? FileDescriptor.standardOutput.writeAll(content)
            if masked { Output.error("propctl render preview: secret values are masked as <secret>: you may not read them") }
        }
        if state != "ok" { throw CommandFailure(.dbusError, "render \(name) would write nothing now: \(state): \(message)") }
    }

    private static func runNow(_ client: PropbusClient, _ name: String, json: Bool) async throws(CommandFailure) {
        let reply: [DBusValue]
        do {
            // A run may take its check's and its reload's time limits, and a reload again.
            reply = try await client.connection.call(destination: PropbusClient.busName, path: Key.rootPath, interface: PropbusClient.managerInterface,
                                                     member: "RunRender", arguments: [.string(name)], timeoutMilliseconds: Int32.max)
        } catch {
            throw CommandFailure(error)
        }
        guard reply.count == 3, let state = reply[0].stringValue, let message = reply[1].stringValue, case .uint64(let revision) = reply[2] else {
            throw CommandFailure(.dbusError, "RunRender replied \(reply)")
        }
        if json {
            Output.line(Output.json(.object([("name", .string(name)), ("state", .string(state)), ("message", .string(message)),
                                             ("revision", .number(revision))])))
        }
        guard state == "ok" else { throw CommandFailure(.dbusError, "render \(name): \(state): \(message)") }
        if !json { Output.line("\(name): \(state): \(message)") }
    }

    private static func object(name: String, _ fields: [String: DBusValue]) -> JSONValue {
        .object([("name", .string(name))] + fields.sorted { $0.key < $1.key }.map { ($0.key, ValueText.jsonValue($0.value)) })
    }

    private static func text(_ value: DBusValue?) -> String { value.map(ValueText.format) ?? "" }
}

extension DBusValue {
    /// The strings of an `as`, or none.
    fileprivate var arrayOfStrings: [String] {
        guard case .array(_, let items) = self else { return [] }
        return items.compactMap(\.stringValue)
    }
}
