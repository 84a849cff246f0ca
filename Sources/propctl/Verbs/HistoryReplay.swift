import CommandLineKit
import DBus
import PropBus

/// `history --format script|profile`: what history holds, as something that redoes it
/// elsewhere: the `propctl` commands of each change in order, or the values the changes left
/// as a document `propctl load --create` applies.
enum HistoryReplay {
    /// A POSIX shell script: one `propctl` command per change, oldest first, every word
    /// shell-quoted. Creations become `create KEY TYPE --default VALUE`; definition changes and
    /// values the caller may not read are left as comments (history holds no definitions).
    static func script(_ rows: [[String: DBusValue]], command parsed: ParsedCommand) -> String {
        var lines = ["#!/bin/sh", "# The changes propctl history listed, as propctl commands, oldest first.", "set -e"]
        for row in rows {
            guard let key = row["key"]?.stringValue else { continue }
            let quotedKey = BindingsVerb.shellQuoted(key)
            let revision = row["revision"].map(ValueText.format) ?? "?"
            if row["redacted"]?.boolValue == true {
                lines.append("# \(key) at revision \(revision): its value is redacted for you, not replayed")
                continue
            }
            if row["new"] == nil, row["new_sha256"] != nil {
                lines.append("# \(key) at revision \(revision): history keeps only its value's digest, not replayed")
                continue
            }
            switch row["kind"]?.stringValue {
            case "created":
                guard let new = row["new"] else { continue }
                lines.append("propctl create \(quotedKey) \(BindingsVerb.shellQuoted(new.signature)) --default \(word(new))")
            case "deleted":
                lines.append("propctl delete \(quotedKey)")
            case "redefined":
                lines.append("# \(key) at revision \(revision): redefined (history holds no definitions), not replayed")
            default:
                guard let new = row["new"] else { continue }
                // `--` only where a value would read as an option (a negative number reads as one).
                let value = word(new)
                lines.append("propctl set \(quotedKey) " + (value.hasPrefix("-") || value.hasPrefix("'-") ? "-- " : "") + value)
            }
        }
        return lines.joined(separator: "\n")
    }

    /// `value` as one shell word that `propctl set` reads back as the same value.
    private static func word(_ value: DBusValue) -> String {
        BindingsVerb.shellQuoted(ValueText.format(value))
    }

    /// A `propctl dump` document of the values the changes left: per key its last value and
    /// type, with a definition (its first value as the default) so `load --create` can make the
    /// key on a daemon that lacks it. Deleted keys and values the caller may not read are left out.
    static func profile(_ rows: [[String: DBusValue]]) -> String {
        var order: [String] = []
        var latest: [String: [String: DBusValue]] = [:]
        var first: [String: DBusValue] = [:]
        for row in rows {
            guard let key = row["key"]?.stringValue else { continue }
            if latest[key] == nil { order.append(key) }
            latest[key] = row
            if first[key] == nil, row["redacted"]?.boolValue != true, let new = row["new"] { first[key] = row["kind"]?.stringValue == "created" ? new : row["old"] ?? new }
        }
        var properties: [(String, JSONValue)] = []
        for key in order {
            guard let row = latest[key], row["kind"]?.stringValue != "deleted", row["redacted"]?.boolValue != true,
                  let value = row["new"] else { continue }
            let initial = first[key] ?? value
            properties.append((key, .object([
                ("type", .string(value.signature)), ("value", ValueText.jsonValue(value)),
                ("definition", .object([("default", ValueText.jsonValue(initial))])),
            ])))
        }
        return JSONValue.object([("properties", .object(properties))]).serialized(pretty: true)
    }
}
