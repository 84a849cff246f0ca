import DBus
import PropBus

/// `ListHistory`'s filter (`a{sv}`), checked whole before anything is read: an entry it does not
/// know, or of another type than its own, is `InvalidArgs` naming it and what was expected, as
/// `RevertRange` does for its range (a misspelt `untill` silently listing everything would
/// be read as "nothing after that").
struct HistoryFilter {
    /// The entries, each with its D-Bus type and what it holds.
    static let entries: [(name: String, type: String, meaning: String)] = [
        ("until", "t", "a revision"), ("uid", "u", "a uid"), ("user", "s", "a user name"),
        ("since_time", "x", "nanoseconds since 1970"), ("until_time", "x", "nanoseconds since 1970"),
        ("denied", "b", "a boolean"), ("latest", "b", "a boolean"),
    ]

    var until: UInt64?
    var userID: UInt32?
    var userName: String?
    var sinceTime: Int64?
    var untilTime: Int64?
    /// The refused attempts instead of the changes.
    var denied = false
    /// One key's latest change (`propctl watch --origin`).
    var latest = false

    init(_ fields: [String: DBusValue]) throws(DBusError) {
        for (name, value) in fields.sorted(by: { $0.key < $1.key }) {
            guard let entry = Self.entries.first(where: { $0.name == name }) else {
                let known = Self.entries.map { "\($0.name) (\($0.type))" }.joined(separator: ", ")
                throw PropBusError(.invalidArgs, "ListHistory: unknown filter entry '\(name)'; the filter takes \(known)").dbusError
            }
            guard value.signature == entry.type else {
                throw PropBusError(.invalidArgs, "ListHistory: filter entry '\(name)' expects \(entry.meaning), type '\(entry.type)'; got type '\(value.signature)'").dbusError
            }
            switch value {
            case .uint64(let revision): until = revision
            case .uint32(let uid): userID = uid
            case .string(let text): userName = text
            case .int64(let time): if name == "since_time" { sinceTime = time } else { untilTime = time }
            case .boolean(let flag): if name == "denied" { denied = flag } else { latest = flag }
            default: break
            }
        }
    }

    /// The scan of changes this filter selects, for `prefix` after `after`.
    func query(prefix: String, after: UInt64) -> HistoryQuery {
        HistoryQuery(prefix: prefix, after: after, until: until, userID: userID, userName: userName, sinceTime: sinceTime, untilTime: untilTime)
    }
}

/// Which changes `RevertRange` undoes: revisions and commit times, each bound inclusive.
struct HistoryRange {
    var since: UInt64?, until: UInt64?, sinceTime: Int64?, untilTime: Int64?

    init(_ fields: [String: DBusValue]) throws(DBusError) {
        for name in fields.keys where !["since", "until", "since_time", "until_time"].contains(name) {
            throw PropBusError(.invalidArgs, "RevertRange: unknown range field '\(name)' (expected since, until (t, revisions), since_time, until_time (x, ns since 1970))").dbusError
        }
        func revision(_ name: String) throws(DBusError) -> UInt64? {
            guard let value = fields[name] else { return nil }
            guard case .uint64(let revision) = value else { throw PropBusError(.invalidArgs, "RevertRange: range field '\(name)' expects a revision (t), got \(value.signature)").dbusError }
            return revision
        }
        func time(_ name: String) throws(DBusError) -> Int64? {
            guard let value = fields[name] else { return nil }
            guard case .int64(let time) = value else { throw PropBusError(.invalidArgs, "RevertRange: range field '\(name)' expects nanoseconds since 1970 (x), got \(value.signature)").dbusError }
            return time
        }
        since = try revision("since"); until = try revision("until")
        sinceTime = try time("since_time"); untilTime = try time("until_time")
        guard since != nil || sinceTime != nil else {
            throw PropBusError(.invalidArgs, "RevertRange expects where the range starts: since (a revision) or since_time").dbusError
        }
    }

    /// The scan of the range's changes of keys under `prefix` (a key or a group, or every key).
    func query(prefix: String) -> HistoryQuery {
        HistoryQuery(prefix: prefix, after: since.map { $0 == 0 ? 0 : $0 - 1 } ?? 0, until: until, sinceTime: sinceTime, untilTime: untilTime)
    }

    var text: String {
        var parts: [String] = []
        if let since { parts.append("from revision \(since)") }
        if let until { parts.append("through revision \(until)") }
        if sinceTime != nil || untilTime != nil { parts.append("in the times given") }
        return parts.joined(separator: " ")
    }
}

/// What a revert writes: the values to set back, and the keys to reset (those that had no value
/// of their own then, and read their default or a layer below the user's: setting what they
/// read would pin it, and a later change of the default would no longer reach them).
struct RevertPlan {
    var set: [(String, DBusValue)] = []
    var reset: [String] = []

    /// The keys it writes, in order.
    var keys: [String] { self.set.map(\.0) + reset }

    /// Puts `key` back to what `record` says it held before (`before`) or after its change,
    /// unless it holds that now; refuses what cannot be put back.
    mutating func restore(_ key: Key, from record: HistoryRecord, before: Bool, current: PropertyModel.Entry) throws(PropBusError) {
        let unset = record.flags.contains(before ? .oldUnset : .newUnset)
        if unset {
            if current.storedValue != nil { reset.append(key.text) }
            return
        }
        guard let value = before ? record.oldValue : record.newValue else {
            let digest = before ? record.oldDigest : record.newDigest
            throw PropBusError(.conflict, "history keeps only a digest of \(key.text)'s value \(before ? "before" : "at") revision \(record.revision) (\(digest?.size ?? 0) bytes, more than --history-max-value-size): it cannot be put back")
        }
        if current.value != value { set.append((key.text, value)) }
    }
}
