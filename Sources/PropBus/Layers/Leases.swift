import DBusValues

/// Who holds a lease (an override, an ephemeral key): its connection, and for `describe` and
/// quotas its uid, pid and process name as the daemon saw them when the lease began.
public struct LeaseHolder: Sendable, Hashable {
    /// The holder's unique bus name; a lease without a TTL ends when it leaves the bus.
    public var busName: String
    /// Charged with an override (``Quota/overrides``); `nil`: not known (access checks off).
    public var userID: UInt32?
    public var processID: UInt32?
    /// `/proc/PID/comm` when the lease began.
    public var command: String?
    /// The fleet host whose bus `busName` is on (an ephemeral fleet key's creator); `nil`: this daemon's bus.
    public var host: String?

    public init(busName: String, userID: UInt32? = nil, processID: UInt32? = nil, command: String? = nil, host: String? = nil) {
        self.busName = busName
        self.userID = userID
        self.processID = processID
        self.command = command
        self.host = host
    }
}

/// A lease: an override of a key's value, or an ephemeral key, held by a connection until it
/// leaves the bus, until a TTL ends, or until released.
///
/// The store keeps the ones that outlive a restart (TTL overrides) and every ephemeral key (one
/// whose creator's connection is gone after a restart is deleted at start-up).
public struct Lease: Sendable, Hashable {
    /// What the lease holds.
    public enum Subject: Sendable, Hashable {
        /// An override of the key with this value.
        case override(DBusValue)
        /// The key itself (an ephemeral key, deleted when the lease ends).
        case key
    }

    /// Unique for the daemon's lifetime and across restarts (overrides and ephemeral keys share
    /// the counter).
    public var handle: UInt64
    public var key: Key
    public var subject: Subject
    public var holder: LeaseHolder
    /// When it began, nanoseconds since the epoch (UTC).
    public var since: UInt64
    /// When it ends by itself, nanoseconds since the epoch (UTC); `nil`: with its holder's connection.
    public var expires: UInt64?

    public init(handle: UInt64, key: Key, subject: Subject, holder: LeaseHolder, since: UInt64, expires: UInt64?) {
        self.handle = handle
        self.key = key
        self.subject = subject
        self.holder = holder
        self.since = since
        self.expires = expires
    }

    /// The lease of an override, as the store keeps it.
    public init(_ hold: OverrideHold, on key: Key) {
        self.init(handle: hold.handle, key: key, subject: .override(hold.value), holder: hold.leaseHolder, since: hold.since, expires: hold.expires)
    }

    /// The override this lease holds, as its key's layers carry it.
    public var hold: OverrideHold? {
        guard case .override(let value) = subject else { return nil }
        return OverrideHold(handle: handle, value: value, holder: holder.busName, since: since, expires: expires,
                            userID: holder.userID, processID: holder.processID, command: holder.command)
    }
}

/// Why a lease ended without a call (history's origin, the daemon's log).
public enum LeaseEnding: Sendable, Hashable {
    /// Its holder's unique name left the bus.
    case holderLeft(String)
    /// Its TTL ran out.
    case expired
    /// Its holder's connection was to a daemon that has since restarted.
    case restarted
    /// An ephemeral fleet key's etcd lease ended on another host's behalf: its creator left that
    /// host's bus, or that host stopped keeping the lease alive (stopped, killed, cut off).
    case fleetLeaseEnded(host: String)

    /// For history's `via`: "its holder :1.5 left the bus".
    public var reason: String {
        switch self {
        case .holderLeft(let name): "its holder \(name) left the bus"
        case .expired: "its ttl ran out"
        case .restarted: "its holder's connection did not survive the daemon's restart"
        case .fleetLeaseEnded(let host): "its etcd lease ended: its creator left host \(host)'s bus, or \(host) stopped keeping the lease alive"
        }
    }
}

/// The model's index of its leases: which key each override is on, the ephemeral keys, the TTL
/// ends, and the next handle. The overrides themselves live in their keys' ``ValueLayers``.
///
/// A plain value, so that a round (and a call inside one) snapshots and restores it whole, as
/// the bindings are. Small: every lease is charged to a uid's quota or held by root.
public struct LeaseTable: Sendable {
    /// The key of each override, by handle.
    public private(set) var overrideKeys: [UInt64: Key] = [:]
    /// The ephemeral keys' leases, by key.
    public private(set) var keyLeases: [Key: Lease] = [:]
    /// The end of each TTL lease, by handle.
    public private(set) var expiries: [UInt64: UInt64] = [:]
    /// The overrides each uid holds (``Quota/overrides``).
    public private(set) var usage = UsageLedger()
    /// The next handle to hand out (adding a lease takes it); stored, so handles never repeat
    /// across restarts.
    public private(set) var nextHandle: UInt64 = 1

    public init() {}

    /// Never hands out a handle below `next` (the stored counter) or `handle` (a loaded lease).
    public mutating func reserveHandles(below next: UInt64) { nextHandle = max(nextHandle, next) }

    public mutating func addOverride(_ hold: OverrideHold, on key: Key) {
        overrideKeys[hold.handle] = key
        usage.charge(.overrides, to: hold.userID)
        if let expires = hold.expires { expiries[hold.handle] = expires }
        reserveHandles(below: hold.handle + 1)
    }

    public mutating func removeOverride(_ hold: OverrideHold) {
        guard overrideKeys.removeValue(forKey: hold.handle) != nil else { return }
        usage.release(.overrides, from: hold.userID)
        expiries[hold.handle] = nil
    }

    public mutating func addKeyLease(_ lease: Lease) {
        if let old = keyLeases.updateValue(lease, forKey: lease.key) { expiries[old.handle] = nil }
        if let expires = lease.expires { expiries[lease.handle] = expires }
        reserveHandles(below: lease.handle + 1)
    }

    @discardableResult
    public mutating func removeKeyLease(of key: Key) -> Lease? {
        guard let lease = keyLeases.removeValue(forKey: key) else { return nil }
        expiries[lease.handle] = nil
        return lease
    }

    /// The earliest TTL end, if any (nanoseconds since the epoch).
    public var nextExpiry: UInt64? { expiries.values.min() }

    /// The handles of the TTL leases ended by `now`, earliest first.
    public func expired(by now: UInt64) -> [UInt64] {
        expiries.filter { $0.value <= now }.sorted { ($0.value, $0.key) < ($1.value, $1.key) }.map(\.key)
    }

    /// Whether no lease is held.
    public var isEmpty: Bool { overrideKeys.isEmpty && keyLeases.isEmpty }
}

extension OverrideHold {
    /// Its holder, as a lease names one.
    public var leaseHolder: LeaseHolder {
        LeaseHolder(busName: holder, userID: userID, processID: processID, command: command)
    }
}
