import CommandLineKit
import DBus
import PropBus

/// `propctl describe KEY`: everything `ListProperties` knows about one key, like gsettings'
/// describe, range and writable together.
enum DescribeCommand: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let key = try PropbusClient.key(parsed.positional("KEY") ?? "")
        let client = try await PropbusClient.connect(parsed)
        guard let item = try await client.list(prefix: key.text).first(where: { $0.key == key.text }) else {
            throw await client.unknownKey(key.text)
        }
        if parsed.flag("json") {
            Output.line(Output.json(ListCommand.json(item)))
            return
        }
        let metadata = item.metadata
        let typeName = (try? DBusType(parsing: item.type))?.name ?? item.type
        func text(_ value: DBusValue) -> String { Output.escaped(ValueText.format(value)) }
        func flag(_ name: String, default fallback: Bool) -> String { (metadata[name]?.boolValue ?? fallback) ? "yes" : "no" }
        var rows: [[String]] = [["key", item.key], ["type", "\(typeName) (\(item.type))"]]
        rows.append(["value", text(item.value)])
        rows.append(["is_set", (metadata["is_set"]?.boolValue ?? true) ? "yes" : "no (reads the default)"])
        if let defaultValue = metadata["default"] { rows.append(["default", text(defaultValue)]) }
        switch (metadata["minimum"], metadata["maximum"]) {
        case (nil, nil): break
        case (let low?, nil): rows.append(["range", "at least \(text(low))"])
        case (nil, let high?): rows.append(["range", "at most \(text(high))"])
        case (let low?, let high?): rows.append(["range", "\(text(low)) to \(text(high))"])
        }
        if case .array(_, let choices)? = metadata["choices"] {
            rows.append(["choices", choices.map { text($0.unwrappingVariantOnce) }.joined(separator: ", ")])
        }
        rows.append(["writable", flag("writable", default: true)])
        if case .array(_, let writers)? = metadata["writers"] {
            rows.append(["writers", writers.compactMap(\.stringValue).joined(separator: ", ")])
        } else {
            rows.append(["writers", "default (root and group propbus on the system bus; anyone on the session bus)"])
        }
        rows.append(["secret", flag("secret", default: false)])
        rows.append(["persistent", flag("persistent", default: true)])
        if let scope = metadata["scope"]?.stringValue {
            let revision = metadata["etcd_revision"].map { ", etcd revision " + ValueText.format($0) } ?? ""
            rows.append(["scope", scope + revision])
        }
        if let source = metadata["source"]?.stringValue { rows.append(["source", source.isEmpty ? "created at run time" : source]) }
        if let state = metadata["state_of"]?.stringValue { rows.append(["state_of", state]) }
        let description = metadata["description"]?.stringValue ?? ""
        rows.append(["description", Output.escaped(description)])
        // Always aligned: one value per line, read by people; scripts use --json.
        let width = rows.map { $0[0].count }.max() ?? 0
        for row in rows { Output.line(Output.padded(row[0], to: width) + "  " + row[1]) }
    }
}
