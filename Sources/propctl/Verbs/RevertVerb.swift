import CommandLineKit
import DBus
import PropBus
import SystemKit

/// `propctl revert [KEY|GROUP…] --to @REV` or `propctl revert --change REV [--force]`:
/// `Manager.Revert`, one atomic Apply recorded via Revert.
enum RevertVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let keys = parsed.positionals("KEY")
        let to = parsed.option("to"), change = parsed.option("change")
        if let since = parsed.option("since") {
            return try await revertRange(parsed, keys: keys, since: since)
        }
        guard parsed.option("until") == nil else { throw CommandFailure(.usage, "revert: --until bounds a --since range") }
        guard (to == nil) != (change == nil), (to == nil) || !keys.isEmpty else {
            throw CommandFailure(.usage, "revert expects KEY… --to @REV, --change REV, or [KEY…] --since TIME [--until TIME]")
        }
        var toRevision: UInt64 = 0, changeRevision: UInt64 = 0
        var toTime: Int64?
        if let to {
            switch try HistoryTime.parse(to, option: "--to", now: Int64(WallClockTime.now().seconds) * 1_000_000_000) {
            case .revision(let revision): toRevision = revision
            case .time(let time): toTime = time
            }
        }
        if let change { changeRevision = try HistoryVerb.revision(change, "--change") ?? 0 }
        let client = try await PropbusClient.connect(parsed)
        if let toTime {
            // The last change at or before that time, among the keys named: their values at
            // that revision are their values at that time.
            for key in keys {
                var after: UInt64 = 0
                repeat {
                    let reply = try await client.manager("ListHistory", [.string(key), .uint64(after), .uint32(0), .vardict(["until_time": .variant(.int64(toTime))])])
                    guard reply.count == 2, case .array(_, let page) = reply[0], case .uint64(let next) = reply[1] else {
                        throw CommandFailure(.dbusError, "propbusd answered ListHistory with \(reply)")
                    }
                    for row in page {
                        if case .uint64(let revision)? = row.stringKeyedEntries?["revision"]?.unwrappingVariantOnce { toRevision = max(toRevision, revision) }
                    }
                    after = next
                } while after != 0
            }
            guard toRevision != 0 else { throw CommandFailure(.dbusError, "history holds no change of \(keys.joined(separator: ", ")) at or before \(to ?? "")") }
        }
        let reply = try await client.manager("Revert", [
            .array(of: .string, keys.map(DBusValue.string)), .uint64(toRevision), .uint64(changeRevision), .boolean(parsed.flag("force")),
        ])
        printReverted(reply, parsed)
    }

    /// `--since … [--until …]`: `Manager.RevertRange`, the span's bounds as history reads them.
    private static func revertRange(_ parsed: ParsedCommand, keys: [String], since: String) async throws(CommandFailure) {
        let now = Int64(WallClockTime.now().seconds) * 1_000_000_000
        var range: [String: DBusValue] = [:]
        switch try HistoryTime.parse(since, option: "--since", now: now) {
        case .revision(let revision): range["since"] = .variant(.uint64(revision))
        case .time(let time): range["since_time"] = .variant(.int64(time))
        }
        if let until = parsed.option("until") {
            switch try HistoryTime.parse(until, option: "--until", now: now) {
            case .revision(let revision): range["until"] = .variant(.uint64(revision))
            case .time(let time): range["until_time"] = .variant(.int64(time))
            }
        }
        let client = try await PropbusClient.connect(parsed)
        let reply = try await client.manager("RevertRange", [.array(of: .string, keys.map(DBusValue.string)), .vardict(range), .boolean(parsed.flag("force"))])
        printReverted(reply, parsed)
    }

    private static func printReverted(_ reply: [DBusValue], _ parsed: ParsedCommand) {
        guard case .array(_, let reverted)? = reply.first else { return }
        if parsed.flag("json") {
            Output.line(Output.json(.array(reverted.compactMap(\.stringValue).map(JSONValue.string))))
        } else {
            for key in reverted.compactMap(\.stringValue) { Output.line("reverted \(key)") }
        }
    }
}
