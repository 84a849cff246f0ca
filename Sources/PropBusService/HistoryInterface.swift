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
                let filter = try HistoryFilter(try call.dictionary("filter").mapValues(\.unwrappingVariant))
                let store = try keptHistory()
                if filter.denied { return try listDenied(call, prefix: prefix, after: after, limit: limit, filter: filter, store: store) }
                // One key's latest change (propctl watch --origin): one indexed lookup, no scan.
                if filter.latest {
                    guard let key = try? Key(prefix) else {
                        throw PropBusError(.invalidKey, "ListHistory with latest expects a key, got '\(prefix)'").dbusError
                    }
                    let latest = try bridged { () throws(PropBusError) in try store.latestChange(of: key) }
                    return .reply([.array(of: Self.historyRow, latest.map { [historyRow($0, for: call)] } ?? []), .uint64(0)])
                }
                return try listHistory(filter.query(prefix: prefix, after: after), limit: limit == 0 ? 1000 : min(Int(limit), 1000), in: store, for: call)
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
                let plan = try bridged { () throws(PropBusError) in
                    change != 0 ? try revertChange(change, force: force, in: store, by: call) : try revertKeys(keys, to: revision, in: store, by: call)
                }
                return try write(reverting: plan, by: call)
            },
            // A span of history undone at once: one Apply, recorded via Revert.
            MethodDescription("RevertRange", in: [("keys", .array(.string)), ("range", .dictionary(key: .string, value: .variant)), ("force", .boolean)],
                              out: [("reverted", .array(.string))], writes: true,
                              // As Revert: the keys are known only from history, each checked like a Set.
                              access: .custom { _ throws(DBusError) in }) { [unowned self] call throws(DBusError) in
                let keys = try call.strings("keys"), force = try call.argument("force").boolValue ?? false
                let range = try HistoryRange(try call.dictionary("range").mapValues(\.unwrappingVariant))
                let store = try keptHistory(": there is nothing to revert to")
                let plan = try bridged { () throws(PropBusError) in try revertRange(keys, range, force: force, in: store, by: call) }
                return try write(reverting: plan, by: call)
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

    /// One change of one key in `ListHistory`: an `a{sv}` (names in docs/history.md).
    static let historyRow = DBusType.dictionary(key: .string, value: .variant)

    /// `record` as `call`'s caller may see it: a secret key's values only for its writers
    /// (a key secret when the change was made stays so for its record, whatever it is now); a
    /// deleted key's, or a deleted definition's (the name came back with another one), only
    /// for privileged callers: its rules are gone with it. A value history keeps as its digest
    /// is shown as its size and digest (`old_size`, `old_sha256`).
    func historyRow(_ record: HistoryRecord, for call: MethodCall) -> DBusValue {
        let mayReadValues: Bool
        if !record.ofDeletedDefinition, let definition = model.entry(for: record.key)?.definition {
            let secret = definition.secret || record.flags.contains(.secret)
            mayReadValues = options.access.mayRead(writers: definition.writers, secret: secret, caller: call.credentials)
        } else {
            mayReadValues = options.access.isPrivileged(call.credentials)
        }
        var row: [String: DBusValue] = [
            "change": .uint64(record.change), "revision": .uint64(record.revision), "time": .int64(record.time),
            "key": .string(record.key.text), "kind": .string(record.kind), "via": .string(record.via),
            "transient": .boolean(record.transient),
        ]
        for (name, value, digest) in [("old", record.oldValue, record.oldDigest), ("new", record.newValue, record.newDigest)] {
            if let value { row[name] = mayReadValues ? value : .string("<redacted>") }
            if let digest {
                row[name + "_size"] = .uint64(digest.size)
                row[name + "_sha256"] = .string(mayReadValues ? SHA256.hex(digest.sha256) : "<redacted>")
            }
        }
        if record.flags.contains(.oldUnset) { row["old_unset"] = .boolean(true) }
        if record.flags.contains(.newUnset) { row["new_unset"] = .boolean(true) }
        if record.ofDeletedDefinition { row["deleted_definition"] = .boolean(true) }
        if !mayReadValues { row["redacted"] = .boolean(true) }
        if let caller = record.caller { Self.addCaller(caller, to: &row) }
        return .vardict(row)
    }

    /// The rows examined by one `ListHistory` or `RevertRange` at most, skipped ones included:
    /// a call holds the service's queue, so its work is bounded, not history's size.
    static let historyScanBudget = 10_000

    /// One page of `query`'s changes for `call`: at most `limit` rows, and no more bytes than one
    /// message holds, the caller may still be sent (``ReplyBytesQuota``) and a round's replies
    /// take (``ObjectTree/replyBytesPerRound``), counted as each row is built, so a page of
    /// large values is cut before it is decoded whole; at most ``historyScanBudget`` rows
    /// examined. The cursor says where the next page starts (0: none).
    func listHistory(_ query: HistoryQuery, limit: Int, in store: any HistoryStore, for call: MethodCall) throws(DBusError) -> MethodResult {
        let messageBudget = model.limits.maximumMessageSize - Page<HistoryRecord>.headroom
        let quotaLeft = charges.replyBytesLeft(for: call)
        let budget = min(messageBudget, quotaLeft ?? .max)
        // Past a round's reply budget a page ends (one row larger than that still goes
        // alone): the rows are read and built on the one queue, so a page of large values
        // holds everyone else's calls as long as it is large.
        let pageBudget = min(budget, ObjectTree.replyBytesPerRound)
        var rows: [DBusValue] = [], revisions: [UInt64] = [], size = 0
        var declined: (record: HistoryRecord, size: Int)?
        let end = try bridged { () throws(PropBusError) in
            try store.scanHistory(query, examining: Self.historyScanBudget) { record in
                guard rows.count < limit else {
                    declined = (record, 0)
                    return false
                }
                let row = historyRow(record, for: call)
                // A struct starts on 8 bytes: count the padding a row may need.
                let rowSize = row.wireSize() + 7
                guard size + rowSize <= (rows.isEmpty ? budget : pageBudget) else {
                    declined = (record, rowSize)
                    return false
                }
                rows.append(row)
                revisions.append(record.revision)
                size += rowSize
                return true
            }
        }
        // The cursor is a revision: a page cut between rows of one revision (a round's
        // deletions) would lose the rest of them, so it ends before that revision instead.
        if let declined, let last = revisions.last, declined.record.revision == last, let first = revisions.firstIndex(of: last), first > 0 {
            rows.removeSubrange(first...)
            revisions.removeSubrange(first...)
        }
        if rows.isEmpty, let declined, declined.size > 0 {
            if let quotaLeft, declined.size <= messageBudget, let refusal = charges.refusal(size: declined.size, left: quotaLeft, for: call) {
                throw refusal
            }
            throw PropBusError(.limitsExceeded, "the change of \(declined.record.key.text) at revision \(declined.record.revision) is too large for one reply (\(declined.size) bytes, --max-message-size)").dbusError
        }
        let next = declined != nil ? revisions.last ?? query.after : end.next ?? 0
        var page = Page<HistoryRecord>([], limit: 0, maximumMessageSize: 0) { _ in .boolean(false) }
        page.rows = rows
        return page.reply(rowType: Self.historyRow, cursor: .uint64(next))
    }

    /// Runs `plan` as one Apply recorded via Revert, each key checked like a Set of it first.
    func write(reverting plan: RevertPlan, by call: MethodCall) throws(DBusError) -> MethodResult {
        for key in plan.keys { try authorizeWrite(existing: key, by: call) }
        let reverted = plan.keys
        return try write(call, via: "Revert", reply: { [.array(of: .string, reverted.map(DBusValue.string))] }) { [unowned self] () throws(PropBusError) in
            try model.apply(set: plan.set, reset: plan.reset)
        }
    }

    /// A caller's fields in a history row (names in docs/history.md).
    static func addCaller(_ caller: WriteSet.Caller, to row: inout [String: DBusValue]) {
        row.merge(caller.fields) { _, new in new }
    }

    /// `ListHistory` with `denied`: the refused attempts, paged by attempt id, for privileged
    /// callers only (they name who tried what, which is nobody else's business).
    func listDenied(_ call: MethodCall, prefix: String, after: UInt64, limit: UInt32, filter: HistoryFilter,
                    store: any HistoryStore) throws(DBusError) -> MethodResult {
        guard options.access.isPrivileged(call.credentials) else {
            throw PropBusError(.accessDenied, "\(AccessPolicy.describe(call.credentials)) may not read the refused attempts; root and propbusd's user may").dbusError
        }
        guard store.recordsDenied else {
            throw PropBusError(.unavailable, "propbusd records no refused attempts (start it with --history-denied)").dbusError
        }
        flushRefusals()
        let (user, userName, sinceTime, untilTime) = (filter.userID, filter.userName, filter.sinceTime, filter.untilTime)
        let pageLimit = limit == 0 ? 1000 : min(Int(limit), 1000)
        var chosen: [(id: Int64, attempt: DeniedAttempt)] = []
        // A cursor past every attempt id reads nothing (a bit pattern would wrap to the start).
        guard after < UInt64(Int64.max) else { return .reply([.array(of: Self.historyRow, []), .uint64(0)]) }
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
