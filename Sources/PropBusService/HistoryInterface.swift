import DBus
import Dispatch
import Glibc
import PropBus

extension Service {
    /// The Manager's history methods (`ListHistory`).
    func historyMethods() -> [MethodDescription] {
        [
            // Paged like ListBindingsPage: a prefix, a cursor (a revision) and a limit; no
            // reply passes the message limit.
            MethodDescription("ListHistory", in: [("prefix", .string), ("after", .uint64), ("limit", .uint32), ("filter", .dictionary(key: .string, value: .variant))],
                              out: [("changes", .array(Self.historyRow)), ("next", .uint64)]) { [unowned self] call throws(DBusError) in
                let prefix = try call.string("prefix"), after = try call.uint64("after"), limit = try call.uint32("limit")
                let filter = try call.dictionary("filter").mapValues(\.unwrappingVariant)
                let store = try keptHistory()
                let until = filter["until"].flatMap { if case .uint64(let v) = $0 { v } else { nil } }
                let user: UInt32? = filter["uid"].flatMap { if case .uint32(let v) = $0 { v } else { nil } }
                let userName = filter["user"]?.stringValue
                let sinceTime = filter["since_time"].flatMap { if case .int64(let v) = $0 { v } else { nil } }
                let untilTime = filter["until_time"].flatMap { if case .int64(let v) = $0 { v } else { nil } }
                if filter["denied"]?.boolValue == true {
                    return try listDenied(call, prefix: prefix, after: after, limit: limit, filter: filter, store: store)
                }
                // One key's latest change (propctl watch --origin): one indexed lookup, no scan.
                if filter["latest"]?.boolValue == true {
                    guard let key = try? Key(prefix) else {
                        throw PropBusError(.invalidKey, "ListHistory with latest expects a key, got '\(prefix)'").dbusError
                    }
                    let latest = try bridged { () throws(PropBusError) in try store.latestChange(of: key) }
                    return .reply([.array(of: Self.historyRow, latest.map { [historyRow($0, for: call)] } ?? []), .uint64(0)])
                }
                // Read in chunks until a page is full: filters may drop rows.
                let pageLimit = limit == 0 ? 1000 : min(Int(limit), 1000)
                var chosen: [HistoryRecord] = []
                var cursor = after
                // A start given as a time: found by the store's time lookup, not by reading
                // history from its start.
                if let sinceTime {
                    cursor = max(cursor, try bridged { () throws(PropBusError) in try store.historyRevision(before: sinceTime) })
                }
                var exhausted = false
                while chosen.count < pageLimit, !exhausted {
                    let chunk = try bridged { () throws(PropBusError) in try store.history(prefix: prefix, after: cursor, limit: pageLimit) }
                    exhausted = chunk.count < pageLimit
                    for record in chunk {
                        // Commit times follow revisions (one clock, read at each commit).
                        if let until, record.revision > until { exhausted = true; break }
                        if let untilTime, record.time > untilTime { exhausted = true; break }
                        cursor = record.revision
                        if let sinceTime, record.time < sinceTime { continue }
                        if let user, record.caller?.userID != user { continue }
                        if let userName, record.caller?.userName != userName { continue }
                        chosen.append(record)
                    }
                }
                let page = Page(chosen, limit: UInt32(pageLimit), maximumMessageSize: model.limits.maximumMessageSize) { [unowned self] in historyRow($0, for: call) }
                let next = page.last?.revision ?? (exhausted ? 0 : cursor)
                return page.reply(rowType: Self.historyRow, cursor: .uint64(next))
            },
            // Undo through history: one Apply of the old values, recorded via Revert.
            MethodDescription("Revert", in: [("keys", .array(.string)), ("revision", .uint64), ("change", .uint64), ("force", .boolean)],
                              out: [("reverted", .array(.string))], writes: true,
                              // The keys are known only from history (a change's keys, a group's): each
                              // is checked like a Set of it before any value of it is compared.
                              access: .custom { _ throws(DBusError) in }) { [unowned self] call throws(DBusError) in
                let keys = try call.strings("keys"), revision = try call.uint64("revision")
                let change = try call.uint64("change"), force = try call.argument("force").boolValue ?? false
                let store = try keptHistory(": there is nothing to revert to")
                let assignments = try bridged { () throws(PropBusError) in
                    change != 0 ? try revertChange(change, force: force, in: store, by: call) : try revertKeys(keys, to: revision, in: store, by: call)
                }
                for (key, _) in assignments { try authorizeWrite(existing: key, by: call) }
                let reverted = assignments.map(\.0)
                return try write(call, via: "Revert", reply: { [.array(of: .string, reverted.map(DBusValue.string))] }) { [unowned self] () throws(PropBusError) in
                    try model.apply(set: assignments, reset: [])
                }
            },
            // A span of history undone at once: one Apply, recorded via Revert.
            MethodDescription("RevertRange", in: [("keys", .array(.string)), ("range", .dictionary(key: .string, value: .variant)), ("force", .boolean)],
                              out: [("reverted", .array(.string))], writes: true,
                              // As Revert: the keys are known only from history, each checked like a Set.
                              access: .custom { _ throws(DBusError) in }) { [unowned self] call throws(DBusError) in
                let keys = try call.strings("keys"), force = try call.argument("force").boolValue ?? false
                let range = try HistoryRange(try call.dictionary("range").mapValues(\.unwrappingVariant))
                let store = try keptHistory(": there is nothing to revert to")
                let assignments = try bridged { () throws(PropBusError) in try revertRange(keys, range, force: force, in: store, by: call) }
                for (key, _) in assignments { try authorizeWrite(existing: key, by: call) }
                let reverted = assignments.map(\.0)
                return try write(call, via: "Revert", reply: { [.array(of: .string, reverted.map(DBusValue.string))] }) { [unowned self] () throws(PropBusError) in
                    try model.apply(set: assignments, reset: [])
                }
            },
        ]
    }

    /// The history port, when history is kept; else `Unavailable`, saying why and what
    /// `consequence` follows.
    private func keptHistory(_ consequence: String = "") throws(DBusError) -> any HistoryStore {
        guard let history, history.historyIsEnabled else {
            throw PropBusError(.unavailable, "propbusd keeps no history (it runs with --no-history or without a store)\(consequence)").dbusError
        }
        return history
    }

    /// Writer rights on `key`, checked by every revert before it compares any value of it:
    /// whether a key holds what it did, or changed since, says something of its value.
    private func authorizeRevert(of key: Key, by call: MethodCall) throws(PropBusError) {
        guard options.access.isEnabled, let entry = model.entry(for: key) else { return }
        try options.access.checkWrite(key.text, writers: entry.definition.writers, caller: call.credentials)
    }

    /// The values `keys` (keys, or groups for every key under them) held at `revision`, for
    /// those that hold something else now.
    private func revertKeys(_ keys: [String], to revision: UInt64, in store: any HistoryStore, by call: MethodCall) throws(PropBusError) -> [(String, DBusValue)] {
        guard !keys.isEmpty else { throw PropBusError(.invalidArgs, "Revert expects keys (or groups) with a revision, or a change") }
        var chosen: [Key] = []
        for text in keys {
            if let key = try? Key(text), model.entry(for: key) != nil { chosen.append(key); continue }
            var found: [Key] = []
            model.forEachEntry(withPrefix: text + ".") { found.append($0.definition.key) }
            guard !found.isEmpty else { throw PropBusError(.unknownKey, "no property or group named \(text)") }
            chosen += found
        }
        for key in chosen { try authorizeRevert(of: key, by: call) }
        var assignments: [(String, DBusValue)] = []
        for key in chosen {
            guard let then = try store.history(of: key, atOrBefore: revision).then, let value = then.newValue else {
                throw PropBusError(.unknownKey, "history holds no value of \(key.text) at or before revision \(revision)")
            }
            if model.entry(for: key)?.value != value { assignments.append((key.text, value)) }
        }
        return assignments
    }

    /// The values change `change` replaced, if its keys still hold what it wrote (else
    /// `Conflict` naming who changed them since, unless `force`).
    private func revertChange(_ change: UInt64, force: Bool, in store: any HistoryStore, by call: MethodCall) throws(PropBusError) -> [(String, DBusValue)] {
        let records = try store.history(ofChange: change)
        guard !records.isEmpty else { throw PropBusError(.unknownKey, "history holds no change \(change) (pruned, or never made)") }
        for record in records { try authorizeRevert(of: record.key, by: call) }
        var assignments: [(String, DBusValue)] = []
        for record in records {
            guard let old = record.oldValue, record.newValue != nil, model.entry(for: record.key) != nil else {
                throw PropBusError(.conflict, "change \(change) \(record.kind) \(record.key.text); Revert puts back values, not properties")
            }
            if !force, model.entry(for: record.key)?.value != record.newValue {
                let latest = try store.latestChange(of: record.key)
                let who = latest?.caller.map { caller in caller.userName ?? caller.userID.map { "uid \($0)" } ?? caller.busName } ?? "the daemon"
                throw PropBusError(.conflict, "\(record.key.text) no longer holds what change \(change) wrote: \(who) changed it since (revision \(latest?.revision ?? 0), via \(latest?.via ?? "?")); use --force to revert anyway")
            }
            assignments.append((record.key.text, old))
        }
        return assignments
    }

    /// The most rows of history one `RevertRange` reads (its keys' spans together): the read
    /// holds the service's queue, so a longer span is refused, not read.
    static let maximumRevertRangeRows = 10_000

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

        func contains(_ record: HistoryRecord) -> Bool {
            if let since, record.revision < since { return false }
            if let sinceTime, record.time < sinceTime { return false }
            return true
        }

        /// Whether `record` and every later one lie past the range (commit times follow revisions).
        func isPast(_ record: HistoryRecord) -> Bool {
            if let until, record.revision > until { return true }
            if let untilTime, record.time > untilTime { return true }
            return false
        }

        var text: String {
            var parts: [String] = []
            if let since { parts.append("from revision \(since)") }
            if let until { parts.append("through revision \(until)") }
            if sinceTime != nil || untilTime != nil { parts.append("in the times given") }
            return parts.joined(separator: " ")
        }
    }

    /// The values the keys changed in `range` (among `keys`, keys or groups; every key when
    /// empty) held before the range's first change of each, if each still holds what the
    /// range's last change of it wrote (else `Conflict` naming who changed it since, unless
    /// `force`). A key created or deleted in the range is a `Conflict`: Revert puts back
    /// values, not properties.
    private func revertRange(_ keys: [String], _ range: HistoryRange, force: Bool, in store: any HistoryStore,
                             by call: MethodCall) throws(PropBusError) -> [(String, DBusValue)] {
        // Asked as prefixes, then kept to the key and what lies under it (as ListHistory's callers do).
        let named = keys.map { $0.hasSuffix(".") ? String($0.dropLast()) : $0 }
        // A named key is refused before its history is read.
        for text in named { if let key = try? Key(text) { try authorizeRevert(of: key, by: call) } }
        func isNamed(_ key: Key) -> Bool { named.isEmpty || named.contains { key.text == $0 || key.text.hasPrefix($0 + ".") } }
        var first: [Key: HistoryRecord] = [:], last: [Key: HistoryRecord] = [:], order: [Key] = []
        var remaining = Self.maximumRevertRangeRows
        // Where the span starts: a revision, or the last change before its start time (the
        // store's time lookup), whichever is later.
        var after = range.since.map { $0 == 0 ? 0 : $0 - 1 } ?? 0
        if let sinceTime = range.sinceTime { after = max(after, try store.historyRevision(before: sinceTime)) }
        for prefix in named.isEmpty ? [""] : named {
            // One read of the rows left and one more, not chunks: each read orders all of the
            // prefix's rows by revision, so chunks would repeat that for every chunk.
            let rows = try store.history(prefix: prefix, after: after, limit: remaining + 1)
            var ended = rows.count <= remaining
            for record in rows {
                if range.isPast(record) { ended = true; break }
                guard remaining > 0 else { break }
                remaining -= 1
                guard range.contains(record), isNamed(record.key) else { continue }
                if first[record.key] == nil { first[record.key] = record; order.append(record.key) }
                last[record.key] = record
            }
            guard ended else {
                throw PropBusError(.limitsExceeded, "RevertRange reads at most \(Self.maximumRevertRangeRows) changes of history in one call, and the span \(range.text)\(named.isEmpty ? "" : " of \(named.joined(separator: ", "))") holds more: bound it with until, or name fewer keys or groups")
            }
        }
        guard !order.isEmpty else {
            throw PropBusError(.unknownKey, "history holds no change \(named.isEmpty ? "" : "of \(named.joined(separator: ", ")) ")\(range.text)")
        }
        for key in order { try authorizeRevert(of: key, by: call) }
        var assignments: [(String, DBusValue)] = []
        for key in order {
            guard let firstRecord = first[key], let lastRecord = last[key] else { continue }
            guard let old = firstRecord.oldValue, let wrote = lastRecord.newValue else {
                let record = firstRecord.oldValue == nil ? firstRecord : lastRecord
                throw PropBusError(.conflict, "\(key.text) was \(record.kind) in the range (revision \(record.revision)); Revert puts back values, not properties: name the other keys or groups")
            }
            guard let current = model.entry(for: key)?.value else {
                throw PropBusError(.unknownKey, "\(key.text), changed in the range, no longer exists: name the other keys or groups")
            }
            if !force, current != wrote {
                let latest = try store.latestChange(of: key)
                let who = latest?.caller.map { caller in caller.userName ?? caller.userID.map { "uid \($0)" } ?? caller.busName } ?? "the daemon"
                throw PropBusError(.conflict, "\(key.text) no longer holds what the range's last change of it wrote (revision \(lastRecord.revision)): \(who) changed it since (revision \(latest?.revision ?? 0), via \(latest?.via ?? "?")); use --force to revert anyway")
            }
            if current != old { assignments.append((key.text, old)) }
        }
        return assignments
    }

    /// One change of one key in `ListHistory`: an `a{sv}` (names in docs/history.md).
    static let historyRow = DBusType.dictionary(key: .string, value: .variant)

    /// `record` as `call`'s caller may see it: a secret key's values only for its writers,
    /// a deleted key's only for privileged callers (its rules are gone with it).
    func historyRow(_ record: HistoryRecord, for call: MethodCall) -> DBusValue {
        let mayReadValues: Bool
        if let definition = model.entry(for: record.key)?.definition {
            mayReadValues = mayRead(definition, by: call)
        } else {
            mayReadValues = options.access.isPrivileged(call.credentials)
        }
        var row: [String: DBusValue] = [
            "change": .uint64(record.change), "revision": .uint64(record.revision), "time": .int64(record.time),
            "key": .string(record.key.text), "kind": .string(record.kind), "via": .string(record.via),
            "transient": .boolean(record.transient),
        ]
        if let old = record.oldValue { row["old"] = mayReadValues ? old : .string("<redacted>") }
        if let new = record.newValue { row["new"] = mayReadValues ? new : .string("<redacted>") }
        if !mayReadValues { row["redacted"] = .boolean(true) }
        if let caller = record.caller { Self.addCaller(caller, to: &row) }
        return .vardict(row)
    }

    /// A caller's fields in a history row (names in docs/history.md).
    static func addCaller(_ caller: WriteSet.Caller, to row: inout [String: DBusValue]) {
        row.merge(caller.fields) { _, new in new }
    }

    /// `ListHistory` with `denied`: the refused attempts, paged by attempt id, for privileged
    /// callers only (they name who tried what, which is nobody else's business).
    func listDenied(_ call: MethodCall, prefix: String, after: UInt64, limit: UInt32, filter: [String: DBusValue],
                    store: any HistoryStore) throws(DBusError) -> MethodResult {
        guard options.access.isPrivileged(call.credentials) else {
            throw PropBusError(.accessDenied, "\(AccessPolicy.describe(call.credentials)) may not read the refused attempts; root and propbusd's user may").dbusError
        }
        guard store.recordsDenied else {
            throw PropBusError(.unavailable, "propbusd records no refused attempts (start it with --history-denied)").dbusError
        }
        flushRefusals()
        let user: UInt32? = filter["uid"].flatMap { if case .uint32(let v) = $0 { v } else { nil } }
        let userName = filter["user"]?.stringValue
        let sinceTime = filter["since_time"].flatMap { if case .int64(let v) = $0 { v } else { nil } }
        let untilTime = filter["until_time"].flatMap { if case .int64(let v) = $0 { v } else { nil } }
        let pageLimit = limit == 0 ? 1000 : min(Int(limit), 1000)
        var chosen: [(id: Int64, attempt: DeniedAttempt)] = []
        var cursor = Int64(bitPattern: after)
        var exhausted = false
        while chosen.count < pageLimit, !exhausted {
            let chunk = try bridged { () throws(PropBusError) in try store.deniedAttempts(prefix: prefix, after: cursor, limit: pageLimit) }
            exhausted = chunk.count < pageLimit
            for (id, attempt) in chunk {
                cursor = id
                if let user, attempt.caller.userID != user { continue }
                if let userName, attempt.caller.userName != userName { continue }
                if let sinceTime, attempt.time < sinceTime { continue }
                if let untilTime, attempt.time > untilTime { continue }
                chosen.append((id, attempt))
            }
        }
        let page = Page(chosen, limit: UInt32(pageLimit), maximumMessageSize: model.limits.maximumMessageSize) { item in
            var row: [String: DBusValue] = [
                "attempt": .uint64(UInt64(bitPattern: item.id)), "time": .int64(item.attempt.time), "key": .string(item.attempt.key),
                "via": .string(item.attempt.caller.via), "error": .string(item.attempt.error),
            ]
            Self.addCaller(item.attempt.caller, to: &row)
            return .vardict(row)
        }
        let next = page.last.map { UInt64(bitPattern: $0.id) } ?? (exhausted ? 0 : UInt64(bitPattern: cursor))
        return page.reply(rowType: Self.historyRow, cursor: .uint64(next))
    }
}

extension Service {
    /// Errors that mean "you may not" and go into the refused attempts (`--history-denied`).
    static func isRefusal(_ error: DBusError) -> Bool {
        error.name == PropBusError.Code.accessDenied.dbusName || error.name.hasSuffix(".Locked")
    }

    /// Records `call`'s refusal: who, when, which keys and method, never a value.
    func recordRefusal(of call: MethodCall, _ error: DBusError, in history: any HistoryStore) {
        guard Self.isRefusal(error), case .call(let caller) = origin(of: call) else { return }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let time = Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
        for key in Self.keysNamed(by: call).prefix(16) {
            history.recordDenied(DeniedAttempt(time: time, key: key, caller: caller, error: error.name))
        }
    }

    /// Prunes history past its bounds in small steps of their own on the queue, a few
    /// milliseconds apart, so calls are served in between and none waits for a big delete.
    func scheduleHistoryPruning() {
        guard !historyPruningScheduled, let history, history.historyNeedsPruning else { return }
        historyPruningScheduled = true
        later(.now() + .milliseconds(5)) { service in
            service.historyPruningScheduled = false
            // The history is the service's, confined to this queue like it.
            guard let history = service.history else { return }
            do throws(PropBusError) {
                if try history.pruneHistory() { service.scheduleHistoryPruning() }
            } catch {
                service.storeFailureHandler?(error)
            }
        }
    }

    /// Writes the refused attempts held since the last round.
    func flushRefusals() {
        guard let history, history.recordsDenied else { return }
        do throws(PropBusError) { try history.flushDenied() } catch { storeFailureHandler?(error) }
    }

    /// The keys a call names, as far as its arguments tell: `Properties.Set`'s (its object's
    /// group and the property), a Manager method's first string, `Apply`'s keys; the call's
    /// path when it names none.
    static func keysNamed(by call: MethodCall) -> [String] {
        let arguments = call.arguments
        if call.message.interface == "org.freedesktop.DBus.Properties", arguments.count >= 2,
           let name = arguments[1].stringValue, let group = Key.group(atPath: call.path) {
            return [group + "." + name]
        }
        if case .dictionary(_, _, let entries)? = arguments.first {
            let keys = entries.compactMap(\.key.stringValue)
            if case .array(_, let reset)? = arguments.dropFirst().first { return keys + reset.compactMap(\.stringValue) }
            return keys
        }
        if let first = arguments.first?.stringValue, (try? Key(first)) != nil { return [first] }
        if case .array(_, let keys)? = arguments.first, keys.allSatisfy({ $0.stringValue.map { (try? Key($0)) != nil } ?? false }), !keys.isEmpty {
            return keys.compactMap(\.stringValue)
        }
        return [Key.group(atPath: call.path) ?? call.path]
    }
}
