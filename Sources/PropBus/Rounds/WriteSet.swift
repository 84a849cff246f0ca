import DBusValues

/// What one committed round did, as a value: each change (one call, one model file, one
/// remote update …) with its origin and every key it touched, before and after.
///
/// The model produces it from what the round already tracks (``PropertyModel/takeWriteSet()``)
/// and the store's commit receives it (``PropertyStore/commit(_:durability:)``): history is a consumer of
/// this value, not another journal. Plain data: no references into the model.
public struct WriteSet: Sendable {
    /// Who made a change through a D-Bus call, as the daemon saw it at the time of the call.
    public struct Caller: Sendable, Hashable {
        /// The method (`Set`, `Apply`, `Reset`, `CompareAndSet`, `CreateProperty`, …).
        public var via: String
        /// The caller's unique bus name.
        public var busName: String
        /// The caller's uid, when known (always with access checks; looked up otherwise).
        public var userID: UInt32?
        /// The caller's user name, from the user database.
        public var userName: String?
        /// The caller's pid, when the bus knows it.
        public var processID: UInt32?
        /// `/proc/PID/comm` at the time of the call.
        public var command: String?
        /// `/proc/PID/exe` at the time of the call.
        public var executable: String?
        /// The systemd unit the caller runs in (`/proc/PID/cgroup`).
        public var unit: String?
        /// The fleet host the call was made on, for a fleet key's change (`nil`: not a fleet
        /// key, or not known).
        public var host: String?

        public init(via: String, busName: String, userID: UInt32? = nil, userName: String? = nil, processID: UInt32? = nil,
                    command: String? = nil, executable: String? = nil, unit: String? = nil, host: String? = nil) {
            self.via = via
            self.busName = busName
            self.userID = userID
            self.userName = userName
            self.processID = processID
            self.command = command
            self.executable = executable
            self.unit = unit
            self.host = host
        }

        /// The caller as history's rows and a fleet value's attribution carry it: `bus_name`,
        /// and those of `uid`, `user`, `pid`, `comm`, `exe`, `unit`, `host` that are known.
        public var fields: [String: DBusValue] {
            var fields: [String: DBusValue] = ["bus_name": .string(busName)]
            if let userID { fields["uid"] = .uint32(userID) }
            if let userName { fields["user"] = .string(userName) }
            if let processID { fields["pid"] = .uint32(processID) }
            if let command { fields["comm"] = .string(command) }
            if let executable { fields["exe"] = .string(executable) }
            if let unit { fields["unit"] = .string(unit) }
            if let host { fields["host"] = .string(host) }
            return fields
        }

        /// A caller from its ``fields`` (unknown or mistyped ones left out) and the method `via`.
        public init(via: String, fields: [String: DBusValue]) {
            func number(_ name: String) -> UInt32? { if case .uint32(let value)? = fields[name] { value } else { nil } }
            self.init(via: via, busName: fields["bus_name"]?.stringValue ?? "", userID: number("uid"), userName: fields["user"]?.stringValue,
                      processID: number("pid"), command: fields["comm"]?.stringValue, executable: fields["exe"]?.stringValue,
                      unit: fields["unit"]?.stringValue, host: fields["host"]?.stringValue)
        }
    }

    /// Where a change came from.
    public enum Origin: Sendable, Hashable {
        /// A D-Bus call.
        case call(Caller)
        /// A `Revert` call: the values a key had before, written back.
        case revert(Caller)
        /// A binding propagating from `key`.
        case binding(from: Key)
        /// A command's state keys following its executions.
        case commandState
        /// A model file's declarations.
        case modelFile(path: String)
        /// `Manager.Reload` or SIGHUP.
        case reload
        /// A layer file (`mandatory.d`, `defaults.d`) read at start-up or by a reload: the file
        /// whose value a key takes now, or whose value it lost.
        case layerFile(path: String)
        /// A fleet key changed by another host, with who made the change there, as the value
        /// in etcd says (`nil`: a value written without attribution).
        case fleet(host: String?, caller: Caller?)
        /// A fleet layer in etcd set or removed (`change`: `mandatory ETCDKEY`, `defaults
        /// ETCDKEY`, with ` removed` when it went), with who did it, as the entry in etcd says
        /// (`nil`: a removal, or an entry written without attribution).
        case fleetLayer(change: String, caller: Caller?)
        /// What the daemon loaded or declared before it owned its name.
        case startup
        /// Anything else the daemon did on its own (a binding ended with its owner's connection).
        case daemon
        /// An override that ended without a call: its holder left the bus, or its TTL ran out.
        case overrideEnded(handle: UInt64, LeaseEnding)
        /// An ephemeral key deleted when its lifetime ended (its creator left, its TTL ran out).
        case lifetimeEnded(handle: UInt64, LeaseEnding)

        /// The word history shows in its `via` column.
        public var via: String {
            switch self {
            case .call(let caller): return caller.via
            case .revert: return "Revert"
            case .binding(let key): return "binding from \(key.text)"
            case .commandState: return "command state"
            case .modelFile(let path): return "model file \(path)"
            case .reload: return "reload"
            case .layerFile(let path): return "layer file \(path)"
            case .fleet(let host, let caller):
                guard let host else { return "fleet change" }
                return "fleet change from \(host)" + (caller.map { $0.via.isEmpty ? "" : " (\($0.via))" } ?? "")
            case .fleetLayer(let change, let caller):
                guard let caller else { return "fleet layer \(change)" }
                return "fleet layer \(change)" + (caller.host.map { " from \($0)" } ?? "") + (caller.via.isEmpty ? "" : " (\(caller.via))")
            case .startup: return "startup"
            case .daemon: return "daemon"
            case .overrideEnded(let handle, let ending): return "override \(handle) ended: \(ending.reason)"
            case .lifetimeEnded(let handle, let ending): return "lifetime \(handle) ended: \(ending.reason)"
            }
        }

        /// The caller, for origins that are calls.
        public var caller: Caller? {
            switch self {
            case .call(let caller), .revert(let caller): return caller
            case .fleet(_, let caller), .fleetLayer(_, let caller): return caller
            default: return nil
            }
        }
    }

    /// One key's state before and after a change (`nil`: it did not exist).
    public struct Entry: Sendable {
        public var key: Key
        public var before: PropertyModel.Entry?
        public var after: PropertyModel.Entry?
        /// How this key changed when it was not as the change's origin says: `binding from KEY`
        /// (a binding propagated the origin's write), `command state` (a command's state keys
        /// following its executions). The change's caller is still the one who set it going.
        public var via: String?

        public init(key: Key, before: PropertyModel.Entry?, after: PropertyModel.Entry?, via: String? = nil) {
            self.key = key
            self.before = before
            self.after = after
            self.via = via
        }

        /// Whether the key's value or definition differs between before and after.
        public var isChange: Bool {
            switch (before, after) {
            case (nil, nil): return false
            case (let old?, let new?):
                // An override changes the layers alone (the user's value stays).
                return old.definition != new.definition || old.storedValue != new.storedValue || old.revision != new.revision
                    || old.layers != new.layers
            default: return true
            }
        }

        /// Whether the key is kept in memory only (transient), after the change or, when
        /// deleted, before it.
        public var isTransient: Bool { !((after ?? before)?.definition.persistent ?? true) }
    }

    /// What one origin did within the round, in the order it did it.
    public struct Change: Sendable {
        public var origin: Origin
        public var entries: [Entry]

        public init(origin: Origin, entries: [Entry]) {
            self.origin = origin
            self.entries = entries
        }

        /// The change's id in history: its highest revision (one Apply of several keys is one change).
        public var id: UInt64 { entries.reduce(0) { max($0, $1.after?.revision ?? $1.before?.revision ?? 0) } }
    }

    /// The round's changes, in the order they were made.
    public var changes: [Change]
    /// The model's revision once the round committed.
    public var revision: UInt64
    /// The rows the store writes for the round (``StoreChanges``), in the same transaction as
    /// the history of ``changes``.
    public var store: StoreChanges

    public init(changes: [Change] = [], revision: UInt64 = 0, store: StoreChanges = StoreChanges()) {
        self.changes = changes
        self.revision = revision
        self.store = store
    }

    /// Whether the round changed no key (it may still have rows to write: a pruned value,
    /// a reservation, the external bookkeeping).
    // A closure, not a key path: applying a key path cost 3.8k instructions a round (the
    // store asks this of every commit).
    public var isEmpty: Bool { changes.allSatisfy { $0.entries.isEmpty } }
}
