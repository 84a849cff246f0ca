import CommandLineKit
import DBus
import PropBus
import SystemKit

/// `propctl history [KEY|GROUP]`: `Manager.ListHistory`, page after page, as a table, JSON,
/// a shell script that redoes the changes, or a profile `propctl load` applies.
enum HistoryVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) { try await run(parsed, blame: false) }

    /// `history`, or with `blame` (`propctl blame GROUP`) only each key's latest change.
    static func run(_ parsed: ParsedCommand, blame: Bool) async throws(CommandFailure) {
        // blame's spec has none of history's options (asking for one it lacks traps).
        let format = (blame ? nil : parsed.option("format")) ?? (parsed.flag("json") ? "json" : "table")
        guard ["table", "json", "script", "profile"].contains(format) else {
            throw CommandFailure(.usage, "--format expects table, json, script or profile, got '\(format)'")
        }
        let denied = !blame && parsed.flag("denied")
        if denied, format == "script" || format == "profile" {
            throw CommandFailure(.usage, "--denied lists refused attempts, which have nothing to replay: use --json or the table")
        }
        // Parsed before connecting: a typo is a usage error even with no daemon.
        let now = Int64(WallClockTime.now().seconds) * 1_000_000_000
        var filter: [String: DBusValue] = [:]
        var after: UInt64 = 0
        if !blame, let since = parsed.option("since") {
            switch try HistoryTime.parse(since, option: "--since", now: now) {
            case .revision(let revision): after = revision == 0 ? 0 : revision - 1
            case .time(let time): filter["since_time"] = .variant(.int64(time))
            }
        }
        if !blame, let until = parsed.option("until") {
            switch try HistoryTime.parse(until, option: "--until", now: now) {
            case .revision(let revision): filter["until"] = .variant(.uint64(revision))
            case .time(let time): filter["until_time"] = .variant(.int64(time))
            }
        }
        // --user as the issue spells it; --by, its first name, stays.
        if !blame, let user = parsed.option("user") ?? parsed.option("by") {
            filter[UInt32(user) == nil ? "user" : "uid"] = .variant(UInt32(user).map { .uint32($0) } ?? .string(user))
        }
        if denied { filter["denied"] = .variant(.boolean(true)) }
        let client = try await PropbusClient.connect(parsed)
        // A key, or a group (every key under it): asked as a prefix, then kept to the key and
        // what lies under it (settings.volume is not settings.volumeMax).
        let named = parsed.positional("KEY").map { $0.hasSuffix(".") ? String($0.dropLast()) : $0 } ?? ""
        var rows: [[String: DBusValue]] = []
        repeat {
            let reply = try await client.manager("ListHistory", [.string(named), .uint64(after), .uint32(0), .vardict(filter)])
            guard reply.count == 2, case .array(_, let page) = reply[0], case .uint64(let next) = reply[1] else {
                throw CommandFailure(.dbusError, "propbusd answered ListHistory with \(reply)")
            }
            rows += page.compactMap { $0.stringKeyedEntries?.mapValues(\.unwrappingVariantOnce) }
            after = next
        } while after != 0
        if !named.isEmpty {
            rows = rows.filter { row in row["key"]?.stringValue.map { $0 == named || $0.hasPrefix(named + ".") } ?? false }
        }
        // blame: per key, its latest change only.
        if blame {
            var latest: [String: [String: DBusValue]] = [:]
            for row in rows { if let key = row["key"]?.stringValue { latest[key] = row } }
            rows = latest.sorted { $0.key < $1.key }.map(\.value)
        }
        switch format {
        case "json":
            Output.line(Output.json(.array(rows.map { row in
                .object(row.sorted { $0.key < $1.key }.map { ($0.key, ValueText.jsonValue($0.value)) })
            })))
        case "script":
            Output.line(HistoryReplay.script(rows, command: parsed))
        case "profile":
            Output.line(HistoryReplay.profile(rows))
        default:
            guard !rows.isEmpty else { return }
            if denied {
                Output.line(Output.table(header: ["TIME", "KEY", "VIA", "ERROR", "WHO"], rows: rows.map { row in
                    [time(row), row["key"]?.stringValue ?? "", row["via"]?.stringValue ?? "", row["error"]?.stringValue ?? "", who(row)]
                }))
                return
            }
            Output.line(Output.table(header: ["REV", "TIME", "KEY", "CHANGE", "VIA", "WHO"], rows: rows.map { row in
                let old = shown(row, "old"), new = shown(row, "new")
                return [row["revision"].map(ValueText.format) ?? "", time(row), row["key"]?.stringValue ?? "", "\(old) → \(new)",
                        row["via"]?.stringValue ?? "", who(row)]
            }))
        }
    }

    /// A row's `old` or `new` value, as the table shows it: the value, or for one history keeps
    /// only as its digest its size and the digest's start; `∅` for none.
    static func shown(_ row: [String: DBusValue], _ side: String) -> String {
        if let value = row[side] { return ValueText.format(value) }
        guard case .uint64(let size)? = row[side + "_size"] else { return "∅" }
        let digest = row[side + "_sha256"]?.stringValue ?? ""
        return "<\(size) bytes, sha256 \(digest.prefix(12))…>"
    }

    /// A row's time in ISO 8601 (UTC).
    private static func time(_ row: [String: DBusValue]) -> String {
        row["time"].flatMap { if case .int64(let ns) = $0 { WallClockTime(seconds: Int(ns / 1_000_000_000), nanoseconds: Int(ns % 1_000_000_000)).iso8601 } else { nil } } ?? ""
    }

    /// Who made a row's change: user (or uid), command and pid, bus name.
    static func who(_ row: [String: DBusValue]) -> String {
        var who = row["user"]?.stringValue ?? row["uid"].map(ValueText.format) ?? ""
        if let comm = row["comm"]?.stringValue { who += " (\(comm)" + (row["pid"].map { " \(ValueText.format($0))" } ?? "") + ")" }
        if let bus = row["bus_name"]?.stringValue { who += " \(bus)" }
        return who.hasPrefix(" ") ? String(who.dropFirst()) : who
    }

    /// `@REV` as a revision; a bare number is taken as one too (`revert --change`).
    static func revision(_ text: String, _ option: String) throws(CommandFailure) -> UInt64? {
        let digits = text.hasPrefix("@") ? String(text.dropFirst()) : text
        guard let revision = UInt64(digits) else {
            throw CommandFailure(.usage, "\(option) expects a revision, @REV (e.g. @42), got '\(text)'")
        }
        return revision
    }
}

/// `propctl blame GROUP`: each key's latest change (value, revision, when, who, via).
enum BlameVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) { try await HistoryVerb.run(parsed, blame: true) }
}
