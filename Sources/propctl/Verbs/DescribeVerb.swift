import CommandLineKit
import DBus
import PropBus
import SystemKit

/// `propctl describe KEY [--field NAME]`: everything `ListProperties` knows about one key, like
/// gsettings' describe, range and writable together.
enum DescribeVerb: Subcommand {
    /// The fields, in the order they are printed.
    static let fields = ["key", "type", "value", "layer", "layer_source", "locked", "user_value", "is_set", "hidden_value", "hidden_reason", "default", "range", "choices",
                         "writable", "writers", "secret", "persistent", "scope", "source", "state_of", "overrides", "lifetime", "description"]

    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let key = try PropbusClient.key(parsed.positional("KEY") ?? "")
        let field = parsed.option("field")
        if let field, !fields.contains(field) {
            throw CommandFailure(.usage, "unknown --field '\(field)'; expected one of: \(fields.joined(separator: ", "))")
        }
        let client = try await PropbusClient.connect(parsed)
        guard let item = try await client.list(prefix: key.text).first(where: { $0.key == key.text }) else {
            // Listings leave out a secret the caller may not read: Get says so (AccessDenied),
            // as `propctl get` does, or that the key does not exist.
            _ = try await client.value(of: key)
            throw await client.unknownKey(key.text)
        }
        if parsed.flag("json"), field == nil {
            Output.line(Output.json(ListVerb.json(item)))
            return
        }
        let rows = describe(item)
        if let field {
            let row = rows.first { $0.name == field }
            if parsed.flag("json") {
                Output.line(Output.json(row?.json ?? .null))
            } else {
                Output.line(row?.script ?? "")
            }
            return
        }
        // Always aligned: one value per line, read by people; scripts use --field or --json.
        let width = rows.map(\.name.count).max() ?? 0
        for row in rows { Output.line(Output.padded(row.name, to: width) + "  " + row.human) }
    }

    /// One field: as people read it, as a script reads it, and as JSON.
    struct Row {
        var name: String
        var human: String
        var script: String
        var json: JSONValue
    }

    static func describe(_ item: ListedProperty) -> [Row] {
        let metadata = item.metadata
        let typeName = (try? DBusType(parsing: item.type))?.name ?? item.type
        func text(_ value: DBusValue) -> String { Output.escaped(ValueText.format(value)) }
        func value(_ name: String, _ value: DBusValue, human: String? = nil) -> Row {
            Row(name: name, human: human ?? text(value), script: ValueText.format(value), json: ValueText.jsonValue(value))
        }
        func flag(_ name: String, _ on: Bool, human: String? = nil) -> Row {
            Row(name: name, human: human ?? (on ? "yes" : "no"), script: on ? "true" : "false", json: .bool(on))
        }
        func plain(_ name: String, _ text: String, human: String? = nil) -> Row {
            Row(name: name, human: human ?? Output.escaped(text), script: text, json: .string(text))
        }
        let isSet = metadata["is_set"]?.boolValue ?? true
        var rows = [plain("key", item.key), plain("type", item.type, human: "\(typeName) (\(item.type))"), value("value", item.value)]
        // Where the value comes from, when a layer file (or an override) gives the key one.
        if let layer = metadata["layer"]?.stringValue {
            let source = metadata["layer_source"]?.stringValue
            rows.append(plain("layer", layer, human: source.map { "\(layer) (\(Output.escaped($0)))" } ?? layer))
            if let source { rows.append(plain("layer_source", source)) }
            let locked = metadata["locked"]?.boolValue ?? false
            rows.append(flag("locked", locked, human: locked ? "yes: a mandatory layer file sets the value" : "no"))
            if let user = metadata["user_value"] { rows.append(value("user_value", user, human: text(user) + " (the user's own, hidden while the layer above holds)")) }
        }
        // Not set: the value is the layer's that holds one, which need not be the definition's default.
        let notSet = switch metadata["layer"]?.stringValue ?? "default" {
        case "default": "no (reads the default)"
        case let layer where layer == "site" || layer == "vendor": "no (reads the \(layer) layer's default)"
        case let layer: "no (the \(layer) layer's value shows)"
        }
        rows.append(flag("is_set", isSet, human: isSet ? "yes" : notSet))
        if let hidden = metadata["hidden_value"] {
            let reason = metadata["hidden_reason"]?.stringValue ?? ""
            rows[rows.count - 1].human = "no (reads the default: the stored value below is hidden)"
            rows.append(value("hidden_value", hidden))
            rows.append(plain("hidden_reason", reason))
        }
        if let defaultValue = metadata["default"] { rows.append(value("default", defaultValue)) }
        let low = metadata["minimum"], high = metadata["maximum"]
        if low != nil || high != nil {
            let human = switch (low, high) {
            case (let low?, nil): "at least \(text(low))"
            case (nil, let high?): "at most \(text(high))"
            default: "\(text(low!)) to \(text(high!))"
            }
            let script = [low, high].map { $0.map(ValueText.format) ?? "" }.joined(separator: " ")
            rows.append(Row(name: "range", human: human, script: script,
                            json: .array([low.map(ValueText.jsonValue) ?? .null, high.map(ValueText.jsonValue) ?? .null])))
        }
        if case .array(_, let choices)? = metadata["choices"] {
            let values = choices.map(\.unwrappingVariantOnce)
            rows.append(Row(name: "choices", human: values.map(text).joined(separator: ", "),
                            script: values.map(ValueText.format).joined(separator: "\n"), json: .array(values.map(ValueText.jsonValue))))
        }
        rows.append(flag("writable", metadata["writable"]?.boolValue ?? true))
        if case .array(_, let writers)? = metadata["writers"] {
            let names = writers.compactMap(\.stringValue)
            rows.append(Row(name: "writers", human: names.joined(separator: ", "), script: names.joined(separator: ","),
                            json: .array(names.map { .string($0) })))
        } else {
            rows.append(Row(name: "writers", human: "default (root and group propbus on the system bus; anyone on the session bus)",
                            script: "", json: .null))
        }
        rows.append(flag("secret", metadata["secret"]?.boolValue ?? false))
        rows.append(flag("persistent", metadata["persistent"]?.boolValue ?? true))
        if let scope = metadata["scope"]?.stringValue {
            let revision = metadata["etcd_revision"].map { ", etcd revision " + ValueText.format($0) } ?? ""
            rows.append(plain("scope", scope, human: scope + revision))
        }
        if let source = metadata["source"]?.stringValue {
            rows.append(plain("source", source, human: source.isEmpty ? "created at run time" : Output.escaped(source)))
        }
        if let state = metadata["state_of"]?.stringValue { rows.append(plain("state_of", state)) }
        if case .array(_, let holds)? = metadata["overrides"], !holds.isEmpty {
            // The last one shows; each names its holder, as ps would.
            let entries = holds.compactMap { $0.stringKeyedEntries?.mapValues(\.unwrappingVariantOnce) }
            let human = entries.reversed().map { hold in
                let value = hold["value"].map { " = " + text($0) } ?? ""
                return "override \(hold["handle"].map(ValueText.format) ?? "?")\(value) held by \(holderText(hold))"
            }.joined(separator: "; ")
            rows.append(Row(name: "overrides", human: human, script: entries.compactMap { $0["handle"].map(ValueText.format) }.joined(separator: "\n"),
                            json: .array(entries.map(leaseJSON))))
        }
        if let lifetime = metadata["lifetime"]?.stringKeyedEntries?.mapValues(\.unwrappingVariantOnce) {
            let kind = lifetime["expires"] == nil ? "connection" : "ttl"
            rows.append(Row(name: "lifetime", human: "ephemeral (\(kind)), created by \(holderText(lifetime))", script: kind, json: leaseJSON(lifetime)))
        }
        rows.append(plain("description", metadata["description"]?.stringValue ?? ""))
        return rows
    }

    /// "propctl (pid 812, uid 1000, :1.42) since 2026-12-01T10:00:00.000Z until …", from an
    /// override's or a lifetime's metadata.
    private static func holderText(_ lease: [String: DBusValue]) -> String {
        var who: [String] = []
        if let pid = lease["pid"] { who.append("pid " + ValueText.format(pid)) }
        if let uid = lease["uid"] { who.append("uid " + ValueText.format(uid)) }
        who.append(lease["holder"]?.stringValue ?? "?")
        if let host = lease["host"]?.stringValue { who.append("on host " + Output.escaped(host)) }
        let name = lease["comm"]?.stringValue.map { Output.escaped($0) + " " } ?? ""
        var text = name + "(" + who.joined(separator: ", ") + ")"
        if let since = time(lease["since"]) { text += " since " + since }
        if let expires = time(lease["expires"]) { text += " until " + expires }
        return text
    }

    private static func time(_ value: DBusValue?) -> String? {
        guard case .uint64(let nanoseconds)? = value else { return nil }
        return WallClockTime(seconds: Int(nanoseconds / 1_000_000_000), nanoseconds: Int(nanoseconds % 1_000_000_000)).iso8601
    }

    private static func leaseJSON(_ lease: [String: DBusValue]) -> JSONValue {
        .object(lease.sorted { $0.key < $1.key }.map { ($0.key, ValueText.jsonValue($0.value)) })
    }
}
