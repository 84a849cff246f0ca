import CommandLineKit
import DBus
import PropBus
import SystemKit

/// `propctl history [KEY|GROUP]`: `Manager.ListHistory`, page after page, as a table or JSON.
enum HistoryVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) { try await run(parsed, blame: false) }

    /// `history`, or with `blame` (`propctl blame GROUP`) only each key's latest change.
    static func run(_ parsed: ParsedCommand, blame: Bool) async throws(CommandFailure) {
        let client = try await PropbusClient.connect(parsed)
        // A key, or a group (every key under it): asked as a prefix, then kept to the key and
        // what lies under it (settings.volume is not settings.volumeMax).
        let named = parsed.positional("KEY").map { $0.hasSuffix(".") ? String($0.dropLast()) : $0 } ?? ""
        let prefix = named
        var filter: [String: DBusValue] = [:]
        var after: UInt64 = 0
        if !blame, let since = parsed.option("since") { after = try revision(since, "--since").map { $0 == 0 ? 0 : $0 - 1 } ?? 0 }
        if !blame, let until = parsed.option("until"), let last = try revision(until, "--until") { filter["until"] = .variant(.uint64(last)) }
        if !blame, let user = parsed.option("by") {
            filter[UInt32(user) == nil ? "user" : "uid"] = .variant(UInt32(user).map { .uint32($0) } ?? .string(user))
        }
        var rows: [[String: DBusValue]] = []
        repeat {
            let reply = try await client.manager("ListHistory", [.string(prefix), .uint64(after), .uint32(0), .vardict(filter)])
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
        if parsed.flag("json") {
            Output.line(Output.json(.array(rows.map { row in
                .object(row.sorted { $0.key < $1.key }.map { ($0.key, ValueText.jsonValue($0.value)) })
            })))
            return
        }
        guard !rows.isEmpty else { return }
        Output.line(Output.table(header: ["REV", "TIME", "KEY", "CHANGE", "VIA", "WHO"], rows: rows.map { row in
            let time = row["time"].flatMap { if case .int64(let ns) = $0 { WallClockTime(seconds: Int(ns / 1_000_000_000), nanoseconds: Int(ns % 1_000_000_000)).iso8601 } else { nil } } ?? ""
            let old = row["old"].map(ValueText.format) ?? "∅"
            let new = row["new"].map(ValueText.format) ?? "∅"
            var who = row["user"]?.stringValue ?? row["uid"].map(ValueText.format) ?? ""
            if let comm = row["comm"]?.stringValue { who += " (\(comm)" + (row["pid"].map { " \(ValueText.format($0))" } ?? "") + ")" }
            if let bus = row["bus_name"]?.stringValue { who += " \(bus)" }
            return [row["revision"].map(ValueText.format) ?? "", time, row["key"]?.stringValue ?? "", "\(old) → \(new)",
                    row["via"]?.stringValue ?? "", who]
        }))
    }

    /// `@REV` as a revision; a bare number is taken as one too (`history`, `revert`).
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
