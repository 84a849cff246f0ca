import DBus
import PropBus

/// `Revert` and `RevertRange`: what history says the keys held, written back as one change.
///
/// Every key is checked like a Set of it before any of its values is compared (whether a key
/// holds what it did says something of its value). A record of a definition deleted since
/// (the key's name came back with another one) is never carried into the present one; a key
/// that had no value of its own is reset, not pinned to what it read; a value history keeps
/// only as its digest cannot be put back.
extension Service {
    /// Writer rights on `key`, checked by every revert before it compares any value of it.
    private func authorizeRevert(of key: Key, by call: MethodCall) throws(PropBusError) {
        guard options.access.isEnabled, let entry = model.entry(for: key) else { return }
        try options.access.checkWrite(key.text, writers: entry.definition.writers, caller: call.credentials)
    }

    /// Who changed a key last, for a conflict's message.
    private static func who(_ record: HistoryRecord?) -> String {
        record?.caller.map { caller in caller.userName ?? caller.userID.map { "uid \($0)" } ?? caller.busName } ?? "the daemon"
    }

    /// What `keys` (keys, or groups for every key under them) held at `revision`, for those
    /// that hold something else now.
    func revertKeys(_ keys: [String], to revision: UInt64, in store: any HistoryStore, by call: MethodCall) throws(PropBusError) -> RevertPlan {
        guard !keys.isEmpty else { throw PropBusError(.invalidArgs, "Revert expects keys (or groups) with a revision, or a change") }
        guard revision <= model.revision else {
            throw PropBusError(.invalidArgs, "Revert to revision \(revision): the latest revision is \(model.revision), so nothing has that revision yet")
        }
        var chosen: [Key] = []
        for text in keys {
            if let key = try? Key(text), model.entry(for: key) != nil { chosen.append(key); continue }
            var found: [Key] = []
            model.forEachEntry(withPrefix: text + ".") { found.append($0.definition.key) }
            guard !found.isEmpty else { throw PropBusError(.unknownKey, "no property or group named \(text)") }
            chosen += found
        }
        for key in chosen { try authorizeRevert(of: key, by: call) }
        var plan = RevertPlan()
        for key in chosen {
            guard let then = try store.history(of: key, atOrBefore: revision).then, then.hasNewValue else {
                throw PropBusError(.unknownKey, "history holds no value of \(key.text) at or before revision \(revision)")
            }
            guard !then.ofDeletedDefinition else {
                throw PropBusError(.conflict, "\(key.text) was deleted and created again after revision \(then.revision): Revert never carries a value into another definition of a key")
            }
            guard let current = model.entry(for: key) else { continue }
            try plan.restore(key, from: then, before: false, current: current)
        }
        return plan
    }

    /// What change `change` replaced, if its keys still hold what it wrote (else `Conflict`
    /// naming who changed them since, unless `force`).
    func revertChange(_ change: UInt64, force: Bool, in store: any HistoryStore, by call: MethodCall) throws(PropBusError) -> RevertPlan {
        let records = try store.history(ofChange: change)
        guard !records.isEmpty else { throw PropBusError(.unknownKey, "history holds no change \(change) (pruned, or never made)") }
        for record in records { try authorizeRevert(of: record.key, by: call) }
        var plan = RevertPlan()
        for record in records {
            guard !record.ofDeletedDefinition else {
                throw PropBusError(.conflict, "change \(change) was made to a definition of \(record.key.text) deleted since: Revert never carries a value into another definition of a key")
            }
            guard record.hadOldValue, record.hasNewValue, let current = model.entry(for: record.key) else {
                throw PropBusError(.conflict, "change \(change) \(record.kind) \(record.key.text); Revert puts back values, not properties")
            }
            if !force, !record.wrote(current.value) {
                let latest = try store.latestChange(of: record.key)
                throw PropBusError(.conflict, "\(record.key.text) no longer holds what change \(change) wrote: \(Self.who(latest)) changed it since (revision \(latest?.revision ?? 0), via \(latest?.via ?? "?")); use --force to revert anyway")
            }
            try plan.restore(record.key, from: record, before: true, current: current)
        }
        return plan
    }

    /// The values the keys changed in `range` (among `keys`, keys or groups; every key when
    /// empty) held before the range's first change of each, if each still holds what the
    /// range's last change of it wrote (else `Conflict` naming who changed it since, unless
    /// `force`). A key created or deleted in the range is a `Conflict`: Revert puts back
    /// values, not properties. At most ``historyScanBudget`` rows are read: a longer span is
    /// refused, not read.
    func revertRange(_ keys: [String], _ range: HistoryRange, force: Bool, in store: any HistoryStore,
                     by call: MethodCall) throws(PropBusError) -> RevertPlan {
        // Asked as prefixes, then kept to the key and what lies under it (as ListHistory's callers do).
        let named = keys.map { $0.hasSuffix(".") ? String($0.dropLast()) : $0 }
        // A named key is refused before its history is read.
        for text in named { if let key = try? Key(text) { try authorizeRevert(of: key, by: call) } }
        func isNamed(_ key: Key) -> Bool { named.isEmpty || named.contains { key.text == $0 || key.text.hasPrefix($0 + ".") } }
        var first: [Key: HistoryRecord] = [:], last: [Key: HistoryRecord] = [:], order: [Key] = []
        var remaining = Self.historyScanBudget
        for prefix in named.isEmpty ? [""] : named {
            // Each key's first and last records only: the rows between them are read, not kept.
            let end = try store.scanHistory(range.query(prefix: prefix), examining: remaining) { record in
                guard isNamed(record.key) else { return true }
                if first[record.key] == nil { first[record.key] = record; order.append(record.key) }
                last[record.key] = record
                return true
            }
            remaining -= end.examined
            guard end.next == nil else {
                throw PropBusError(.limitsExceeded, "RevertRange reads at most \(Self.historyScanBudget) changes of history in one call, and the span \(range.text)\(named.isEmpty ? "" : " of \(named.joined(separator: ", "))") holds more: bound it with until, or name fewer keys or groups")
            }
        }
        guard !order.isEmpty else {
            throw PropBusError(.unknownKey, "history holds no change \(named.isEmpty ? "" : "of \(named.joined(separator: ", ")) ")\(range.text)")
        }
        for key in order { try authorizeRevert(of: key, by: call) }
        var plan = RevertPlan()
        for key in order {
            guard let firstRecord = first[key], let lastRecord = last[key] else { continue }
            guard firstRecord.hadOldValue, lastRecord.hasNewValue else {
                let record = firstRecord.hadOldValue ? lastRecord : firstRecord
                throw PropBusError(.conflict, "\(key.text) was \(record.kind) in the range (revision \(record.revision)); Revert puts back values, not properties: name the other keys or groups")
            }
            guard !firstRecord.ofDeletedDefinition, !lastRecord.ofDeletedDefinition else {
                throw PropBusError(.conflict, "\(key.text) was deleted and created again since the range: Revert never carries a value into another definition of a key")
            }
            guard let current = model.entry(for: key) else {
                throw PropBusError(.unknownKey, "\(key.text), changed in the range, no longer exists: name the other keys or groups")
            }
            if !force, !lastRecord.wrote(current.value) {
                let latest = try store.latestChange(of: key)
                throw PropBusError(.conflict, "\(key.text) no longer holds what the range's last change of it wrote (revision \(lastRecord.revision)): \(Self.who(latest)) changed it since (revision \(latest?.revision ?? 0), via \(latest?.via ?? "?")); use --force to revert anyway")
            }
            try plan.restore(key, from: firstRecord, before: true, current: current)
        }
        return plan
    }
}
