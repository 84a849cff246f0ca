import DBusValues

/// One key's change, as history shows it.
public struct HistoryRecord: Sendable {
    /// The change it belongs to (one Apply of several keys is one change): its highest revision.
    public var change: UInt64
    /// The key's revision after the change (for a deletion: the round's revision).
    public var revision: UInt64
    /// When it was committed, in nanoseconds since the epoch.
    public var time: Int64
    /// The key that changed.
    public var key: Key
    /// `created`, `changed`, `redefined` or `deleted`.
    public var kind: String
    /// The value before and after (`nil`: the key did not exist).
    public var oldValue: DBusValue?
    /// The value after the change (`nil`: the key was deleted).
    public var newValue: DBusValue?
    /// The method or the daemon's own work that made it (`Set`, `Apply`, `reload`, …).
    public var via: String
    /// Who made it, for a change made by a call.
    public var caller: WriteSet.Caller?
    /// Whether the key was transient (this record lives in memory only).
    public var transient: Bool

    /// A record with every field given (a store reads them back from its rows).
    public init(change: UInt64, revision: UInt64, time: Int64, key: Key, kind: String, oldValue: DBusValue?,
                newValue: DBusValue?, via: String, caller: WriteSet.Caller?, transient: Bool) {
        self.change = change
        self.revision = revision
        self.time = time
        self.key = key
        self.kind = kind
        self.oldValue = oldValue
        self.newValue = newValue
        self.via = via
        self.caller = caller
        self.transient = transient
    }
}
