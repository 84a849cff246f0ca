import DBus
import Dispatch
import Etcd
import PropBus
import PropBusService
import PropBusSystem

/// An ephemeral fleet key's lifetime as etcd holds it, under `PREFIX/lifetimes/KEY`: attached,
/// with the key's definition and value, to the key's own etcd lease, so that the lease's end
/// (revoked, or expired) deletes all three in one revision, which every host applies as one
/// deletion. Every host reads its lifetime from it (`describe`, the `lifetime` metadata).
public struct FleetLifetime: Sendable, Equatable {
    /// The etcd lease (also the lifetime's handle in the metadata and in history).
    public var lease: Int64
    /// The lease's time to live in etcd, in seconds.
    public var ttl: Int64
    /// The host that created the key, whose bus its creator is on.
    public var host: String
    /// Its creator's connection on `host`'s bus, with uid, pid and process name.
    public var holder: LeaseHolder
    /// When it began and, for a TTL, when it ends: nanoseconds since the epoch (the creating host's clock).
    public var since: UInt64
    /// `nil`: the creator's connection (the creating host keeps the lease alive while it lives).
    public var expires: UInt64?

    /// A lifetime of `lease` (`ttl` seconds in etcd), created on `host` by `holder`.
    public init(lease: Int64, ttl: Int64, host: String, holder: LeaseHolder, since: UInt64, expires: UInt64?) {
        self.lease = lease
        self.ttl = ttl
        self.host = host
        self.holder = holder
        self.since = since
        self.expires = expires
    }

    /// ValueCodec bytes of an `a{sv}`: `lease`, `ttl`, `host`, `holder`, `uid`, `pid`, `comm`,
    /// `since`, `expires`.
    public func encoded() -> [UInt8] {
        var fields: [String: DBusValue] = ["lease": .int64(lease), "ttl": .int64(ttl), "host": .string(host),
                                           "holder": .string(holder.busName), "since": .uint64(since)]
        if let expires { fields["expires"] = .uint64(expires) }
        if let uid = holder.userID { fields["uid"] = .uint32(uid) }
        if let pid = holder.processID { fields["pid"] = .uint32(pid) }
        if let command = holder.command { fields["comm"] = .string(command) }
        return ValueCodec.encode(.vardict(fields))
    }

    /// The lifetime ``encoded()`` wrote; `InvalidValue` for anything else.
    public static func decode(_ bytes: [UInt8]) throws(PropBusError) -> FleetLifetime {
        guard let fields = (try? ValueCodec.decode(bytes))?.stringKeyedEntries?.mapValues(\.unwrappingVariant),
              case .int64(let lease)? = fields["lease"], case .int64(let ttl)? = fields["ttl"],
              let host = fields["host"]?.stringValue, let holder = fields["holder"]?.stringValue,
              case .uint64(let since)? = fields["since"] else {
            throw PropBusError(.invalidValue, "an ephemeral fleet key's lifetime in etcd is not a{sv} with lease, ttl, host, holder and since")
        }
        func uint32(_ name: String) -> UInt32? { if case .uint32(let v)? = fields[name] { v } else { nil } }
        let expires: UInt64? = if case .uint64(let v)? = fields["expires"] { v } else { nil }
        return FleetLifetime(lease: lease, ttl: ttl, host: host,
                             holder: LeaseHolder(busName: holder, userID: uint32("uid"), processID: uint32("pid"),
                                                 command: fields["comm"]?.stringValue, host: host),
                             since: since, expires: expires)
    }

    /// The lease of `key` as the model's metadata shows one (`lifetime`): the etcd lease id is its handle.
    public func lease(of key: Key) -> PropBus.Lease {
        PropBus.Lease(handle: UInt64(bitPattern: lease), key: key, subject: .key, holder: holder, since: since, expires: expires)
    }
}

extension FleetLayout {
    /// `PREFIX/lifetimes/KEY`: an ephemeral fleet key's ``FleetLifetime``.
    public func lifetimeKey(_ key: Key) -> [UInt8] { lifetimesPrefix + Array(key.text.utf8) }
    /// `PREFIX/lifetimes/`, where every ephemeral fleet key's lifetime is.
    public var lifetimesPrefix: [UInt8] { prefix + Array("lifetimes/".utf8) }

    /// The key whose lifetime `etcdKey` holds, if it is one.
    public func lifetimeSubject(_ etcdKey: [UInt8]) -> Key? {
        let folder = lifetimesPrefix
        guard etcdKey.count > folder.count, etcdKey.starts(with: folder) else { return nil }
        return try? Key(String(decoding: etcdKey[folder.count...], as: UTF8.self))
    }

    /// `plan` with every put of an ephemeral fleet key's definition or value attached to the
    /// key's lease (`lease`), so that a Set or a redefinition never detaches it from its lease, and
    /// with the ``FleetLifetime`` of each key `creating` holds put beside its new definition.
    public func attachingLifetimes(to plan: Transaction, lease: (Key) -> Int64?, creating: [Key: FleetLifetime]) -> Transaction {
        var plan = plan
        var created: [Key] = []
        plan.success = plan.success.map { op in
            guard case .put(var put) = op else { return op }
            let key: Key
            switch classify(put.key) {
            case .value(let k): key = k
            case .definition(let k):
                key = k
                if creating[k] != nil { created.append(k) }
            default: return op
            }
            guard let id = lease(key) else { return op }
            put.lease = id
            return .put(put)
        }
        for key in created {
            guard let lifetime = creating[key] else { continue }
            plan.success.append(.put(lifetimeKey(key), lifetime.encoded(), lease: lifetime.lease))
        }
        return plan
    }
}

/// A CreateProperty with a fleet lifetime waiting for its etcd lease.
struct PendingCreation {
    var call: MethodCall
    var key: Key
    /// The uid charged (root and unknown: 0).
    var user: UInt32
    var ttl: Int64
    var lifetime: UInt64?
    var holder: LeaseHolder
    var create: (_ confirm: @escaping () -> Void) throws(DBusError) -> MethodResult
}

/// The ephemeral fleet keys as a host knows them; the D-Bus queue's (``Fleet``).
struct FleetLifetimes {
    /// Every ephemeral fleet key's lifetime etcd holds, whichever host created it.
    var records: [Key: FleetLifetime] = [:]
    /// This host's creations whose lease is granted and whose txn is not answered yet.
    var creating: [Key: FleetLifetime] = [:]
    /// CreateProperty calls waiting for their lease's grant, by ``Fleet/nextID``.
    var granting: [UInt64: PendingCreation] = [:]
    /// The connection lifetimes this host keeps alive (its own creators'), with their key.
    var kept: [Int64: Key] = [:]
    /// Why this host ended a lease, for history's origin when etcd's deletion arrives.
    var endings: [Int64: LeaseEnding] = [:]
    /// The etcd revision of each lifetime's deletion, so that an older read does not bring it back.
    var deletedAt: [Key: Int64] = [:]
    /// The lifetimes whose record the update being applied deletes (``Fleet/lifetimeEnding(of:)``).
    var endedNow: [Key: FleetLifetime] = [:]
    var keeper: FleetLeaseKeeper?
}

/// Grants, keeps alive and revokes the etcd leases of this host's ephemeral fleet keys, on a
/// queue of its own (a keepalive waiting for a dead member delays no write and no presence).
///
/// **Ownership.** ``alive`` and the timer belong to ``queue``; the ``Fleet`` owns the keeper.
/// `@unchecked Sendable` for that reason.
final class FleetLeaseKeeper: @unchecked Sendable {
    private let client: any EtcdPort
    private let queue = DispatchQueue(label: "org.propbus.propbusd.fleet-leases")
    /// Told (on the keeper's queue) of a kept lease etcd no longer has: its keys are gone.
    private let lost: @Sendable (Int64) -> Void
    // The queue's.
    private var alive: Set<Int64> = []
    private var timer: DispatchSourceTimer?

    init(client: any EtcdPort, lost: @escaping @Sendable (Int64) -> Void) {
        self.client = client
        self.lost = lost
    }

    /// Asks etcd for a lease of `ttl` seconds; `done` gets its id, on the keeper's queue.
    func grant(ttl: Int64, _ done: @escaping @Sendable (Result<Int64, EtcdError>) -> Void) {
        let client = client
        queue.async { done(Result { () throws(EtcdError) in try client.grantLease(ttl: ttl).id }) }
    }

    /// Reads `request` on the keeper's queue.
    func read(_ request: RangeRequest, _ done: @escaping @Sendable (Result<RangeResponse, EtcdError>) -> Void) {
        let client = client
        queue.async { done(Result { () throws(EtcdError) in try client.range(request) }) }
    }

    /// Keeps `id` alive every ``Fleet/leaseKeepAliveInterval`` until ``revoke(_:)``.
    func keep(_ id: Int64) {
        queue.async { [self] in
            alive.insert(id)
            guard timer == nil else { return }
            let timer = DispatchSource.makeTimerSource(queue: queue)
            timer.schedule(deadline: .now() + Fleet.leaseKeepAliveInterval, repeating: Fleet.leaseKeepAliveInterval)
            timer.setEventHandler { [weak self] in self?.renew() }
            self.timer = timer
            timer.resume()
        }
    }

    /// Stops keeping `id` alive and revokes it (its keys go on every host). When etcd cannot be
    /// reached, its expiry does the same within its TTL.
    func revoke(_ id: Int64) {
        let client = client
        queue.async { [self] in
            alive.remove(id)
            try? client.revoke(lease: id)
        }
    }

    /// At shutdown: revokes every kept lease, waiting (the first failure ends it: etcd expires
    /// the rest within their TTL).
    func revokeAll() {
        let client = client
        queue.sync {
            timer?.cancel()
            timer = nil
            for id in alive.sorted() {
                do throws(EtcdError) { try client.revoke(lease: id) } catch { if error.code != .leaseNotFound { break } }
            }
            alive = []
        }
    }

    private func renew() {
        for id in alive.sorted() {
            do throws(EtcdError) {
                _ = try client.keepAlive(lease: id)
            } catch {
                // Unreachable: the next tick tries again (the lease lives for its TTL meanwhile).
                guard error.code == .leaseNotFound else { return }
                alive.remove(id)
                lost(id)
            }
        }
    }
}

extension Fleet {
    /// The etcd lease TTL of a connection lifetime, in seconds: how long an ephemeral fleet key
    /// outlives a host that was killed (or cut off from etcd) before every other host drops it.
    static let connectionLeaseTTL: Int64 = 5
    /// How often the creating host renews a connection lifetime's lease (a fifth of its TTL, so
    /// that a few slow or lost keepalives do not end it).
    static let leaseKeepAliveInterval: DispatchTimeInterval = .seconds(1)
    /// At most this many ephemeral fleet keys created on one host at once, and per uid other
    /// than root: each is an etcd lease this host renews every second (connection) or etcd holds.
    static let maximumOwnLifetimes = 1024
    static let maximumLifetimesPerUser = 64
    /// How long a creation may wait for its txn's answer before its lease is given up (the
    /// write's own bound is twice the request timeout at most).
    static let creationBound: DispatchTimeInterval = .seconds(15)

    private var leaseKeeper: FleetLeaseKeeper {
        if let keeper = lifetimes.keeper { return keeper }
        let fleet = bound
        let keeper = FleetLeaseKeeper(client: client) { id in
            fleet.async { fleet in fleet.lifetimes.kept[id] = nil }
        }
        lifetimes.keeper = keeper
        return keeper
    }

    /// `lifetime` metadata of a fleet key that is ephemeral (on every host).
    func lifetime(of definition: PropertyDefinition) -> PropBus.Lease? {
        guard definition.scope == .fleet, !lifetimes.records.isEmpty || !lifetimes.creating.isEmpty else { return nil }
        return (lifetimes.records[definition.key] ?? lifetimes.creating[definition.key])?.lease(of: definition.key)
    }

    /// CreateProperty of a fleet key with `lifetime` (nanoseconds of TTL, or `nil`: the
    /// connection): grants the etcd lease first, then runs `create` (the call's write, whose
    /// txn puts the definition and the ``FleetLifetime`` attached to the lease); `create` calls
    /// `confirm` once etcd and the mirror have the key. Answers later.
    func createEphemeral(_ call: MethodCall, key keyText: String, lifetime: UInt64?, holder: LeaseHolder,
                         _ create: @escaping (_ confirm: @escaping () -> Void) throws(DBusError) -> MethodResult) throws(DBusError) -> MethodResult {
        dispatchPrecondition(condition: .onQueue(queue))
        let key = try bridged { () throws(PropBusError) in try Key(keyText) }
        guard state == .connected else { throw unavailable([key], because: "FleetState is \(state.rawValue)").dbusError }
        let user = holder.userID ?? 0
        try bridged { () throws(PropBusError) in try checkLifetimeBounds(of: key, user: user) }
        // etcd counts whole seconds: a TTL ends at the second after the one asked, never before.
        let ttl = lifetime.map { Int64(($0 + 999_999_999) / 1_000_000_000) } ?? Self.connectionLeaseTTL
        let id = nextID
        nextID += 1
        lifetimes.granting[id] = PendingCreation(call: call, key: key, user: user, ttl: ttl, lifetime: lifetime, holder: holder, create: create)
        let fleet = bound
        leaseKeeper.grant(ttl: ttl) { result in
            fleet.async { fleet in
                guard let pending = fleet.lifetimes.granting.removeValue(forKey: id) else {
                    // Its creator left meanwhile (``endLifetimes(heldBy:)`` answered the call): nothing holds the lease.
                    if case .success(let lease) = result { fleet.leaseKeeper.revoke(lease) }
                    return
                }
                fleet.granted(result, pending)
                fleet.service.tree.connection.scheduleRound()
            }
        }
        return .deferred
    }

    private func checkLifetimeBounds(of key: Key, user: UInt32) throws(PropBusError) {
        let host = configuration.hostName
        let own = lifetimes.records.values.filter { $0.host == host } + lifetimes.creating.values
        let pending = lifetimes.granting.count
        guard own.count + pending < Self.maximumOwnLifetimes else {
            throw PropBusError(.limitsExceeded, "option 'lifetime' for \(key): host \(host) holds \(own.count + pending) ephemeral fleet keys, at most \(Self.maximumOwnLifetimes); end some first")
        }
        guard user != 0 else { return }
        let mine = own.filter { $0.holder.userID == user }.count + lifetimes.granting.values.filter { $0.user == user }.count
        guard mine < Self.maximumLifetimesPerUser else {
            throw PropBusError(.limitsExceeded, "option 'lifetime' for \(key): uid \(user) holds \(mine) ephemeral fleet keys on host \(host), at most \(Self.maximumLifetimesPerUser); end some first")
        }
    }

    private func granted(_ result: Result<Int64, EtcdError>, _ pending: PendingCreation) {
        let key = pending.key, call = pending.call
        let id: Int64
        switch result {
        case .failure(let error):
            call.fail(unavailable([key], because: "etcd granted no lease for its lifetime: \(error.message)").dbusError)
            return
        case .success(let granted):
            id = granted
        }
        guard !stopped else {
            leaseKeeper.revoke(id)
            call.fail(unavailable([key], because: "the daemon is stopping").dbusError)
            return
        }
        let since = Service.wallClockNow()
        var holder = pending.holder
        holder.host = configuration.hostName
        let record = FleetLifetime(lease: id, ttl: pending.ttl, host: configuration.hostName, holder: holder, since: since,
                                   expires: pending.lifetime.map { since + $0 })
        lifetimes.creating[key] = record
        if record.expires == nil {
            lifetimes.kept[id] = key
            leaseKeeper.keep(id)
        }
        let confirm: () -> Void = { [weak self] in
            guard let self, lifetimes.creating[key]?.lease == id else { return }
            lifetimes.records[key] = lifetimes.creating.removeValue(forKey: key)
        }
        do throws(DBusError) {
            // Checked again: another host may have created the key while the lease was granted.
            try bridged { () throws(PropBusError) in
                if service.model.entry(for: key) != nil {
                    throw PropBusError(.exists, "option 'lifetime' for \(key): the fleet key exists already (another host created it meanwhile); only the CreateProperty that creates a fleet key gives it a lifetime")
                }
            }
            switch try pending.create(confirm) {
            case .deferred:
                bound.async(after: .now() + Self.creationBound) { fleet in fleet.abandonCreation(of: key, lease: id) }
            case .reply(let values):
                abandonCreation(of: key, lease: id)
                call.reply(values)
            case .stream:
                abandonCreation(of: key, lease: id)
                call.reply([])
            }
        } catch {
            abandonCreation(of: key, lease: id)
            call.fail(error)
        }
    }

    /// A creation that failed, or was not answered within ``creationBound``: its lease goes (the
    /// key with it, had etcd taken it).
    private func abandonCreation(of key: Key, lease id: Int64) {
        guard lifetimes.creating[key]?.lease == id else { return }
        lifetimes.creating[key] = nil
        lifetimes.kept[id] = nil
        leaseKeeper.revoke(id)
    }

    /// Revokes the leases of the connection lifetimes `name` (which left this host's bus) holds.
    func endLifetimes(heldBy name: String) {
        for (id, pending) in lifetimes.granting where pending.lifetime == nil && pending.holder.busName == name {
            lifetimes.granting[id] = nil
            pending.call.fail(PropBusError(.unavailable, "option 'lifetime' for \(pending.key): \(name) left the bus before the key was made").dbusError)
        }
        guard !lifetimes.kept.isEmpty else { return }
        for (key, record) in lifetimes.records.merging(lifetimes.creating, uniquingKeysWith: { $1 })
        where record.host == configuration.hostName && record.expires == nil && record.holder.busName == name {
            end(key, record, because: .holderLeft(name))
        }
    }

    private func end(_ key: Key, _ record: FleetLifetime, because ending: LeaseEnding) {
        lifetimes.endings[record.lease] = ending
        lifetimes.kept[record.lease] = nil
        if lifetimes.creating[key]?.lease == record.lease { lifetimes.creating[key] = nil }
        leaseKeeper.revoke(record.lease)
    }

    /// The ``Transaction`` of a write with ephemeral fleet keys' leases attached (``FleetLayout/attachingLifetimes(to:lease:creating:)``).
    func attachingLifetimes(to plan: FleetLayout.Transaction) -> FleetLayout.Transaction {
        guard !lifetimes.records.isEmpty || !lifetimes.creating.isEmpty else { return plan }
        return layout.attachingLifetimes(to: plan, lease: { [lifetimes] key in (lifetimes.creating[key] ?? lifetimes.records[key])?.lease },
                                         creating: lifetimes.creating)
    }

    /// Takes the lifetimes an update (or a full read, `snapshot`) holds, before ``apply(_:through:snapshot:)``
    /// applies its definitions and values; call ``forgetEndedLifetimes()`` after.
    func noteLifetimes(_ events: [WatchEvent], snapshot: Bool) {
        lifetimes.endedNow = [:]
        var seen: Set<Key> = []
        var definitionsDeleted: [Key] = []
        for event in events {
            if let key = layout.lifetimeSubject(event.kv.key) {
                if event.kind == .put {
                    seen.insert(key)
                    note(event.kv, of: key)
                } else {
                    lifetimes.deletedAt[key] = event.kv.modRevision
                    if let record = lifetimes.records.removeValue(forKey: key) { lifetimes.endedNow[key] = record }
                }
            } else if event.kind == .delete, case .definition(let key) = layout.classify(event.kv.key) {
                definitionsDeleted.append(key)
            }
        }
        if snapshot {
            // etcd's whole state: a lifetime it lacks ended while this host was not watching.
            for key in lifetimes.records.keys where !seen.contains(key) { lifetimes.endedNow[key] = lifetimes.records.removeValue(forKey: key) }
        }
        // A definition deleted without its lifetime (DeleteProperty): the lease holds only the
        // record now; it goes too (any host may revoke it: the others find it gone).
        for key in definitionsDeleted where lifetimes.endedNow[key] == nil {
            guard let record = lifetimes.records.removeValue(forKey: key) else { continue }
            lifetimes.kept[record.lease] = nil
            leaseKeeper.revoke(record.lease)
        }
    }

    private func note(_ kv: KeyValue, of key: Key) {
        if let deleted = lifetimes.deletedAt[key], deleted >= kv.modRevision { return }
        lifetimes.deletedAt[key] = nil
        let record: FleetLifetime
        do throws(PropBusError) { record = try FleetLifetime.decode(kv.value) } catch {
            Service.log("fleet: the lifetime of \(key) at etcd revision \(kv.modRevision) cannot be read: \(error.message)")
            return
        }
        lifetimes.records[key] = record
        if lifetimes.creating[key]?.lease == record.lease { lifetimes.creating[key] = nil }
        // A connection lifetime of this host that it does not keep alive: its creator's
        // connection was to this daemon before it restarted (or its creation was given up).
        if record.host == configuration.hostName, record.expires == nil, lifetimes.kept[record.lease] == nil,
           lifetimes.endings[record.lease] == nil {
            end(key, record, because: .restarted)
        }
    }

    /// The origin of the deletion of `key`, when its lifetime ended in the update being applied.
    func lifetimeEnding(of key: Key) -> WriteSet.Origin? {
        guard let record = lifetimes.endedNow[key] else { return nil }
        let ending = lifetimes.endings.removeValue(forKey: record.lease)
            ?? (record.expires != nil ? .expired : .fleetLeaseEnded(host: record.host))
        return .lifetimeEnded(handle: UInt64(bitPattern: record.lease), ending)
    }

    func forgetEndedLifetimes() {
        for record in lifetimes.endedNow.values {
            lifetimes.endings[record.lease] = nil
            lifetimes.kept[record.lease] = nil
        }
        lifetimes.endedNow = [:]
    }

    /// At each connection: reads every lifetime etcd holds (a restarted host resumes from its
    /// cursor, and the records before it are in no update it will see), and revokes this host's
    /// connection lifetimes from before its start.
    func refreshLifetimes() {
        let fleet = bound
        leaseKeeper.read(RangeRequest(key: layout.lifetimesPrefix, prefix: true)) { result in
            guard case .success(let response) = result else { return }
            fleet.async { fleet in
                guard !fleet.stopped else { return }
                for kv in response.kvs {
                    guard let key = fleet.layout.lifetimeSubject(kv.key), fleet.lifetimes.records[key] == nil else { continue }
                    fleet.note(kv, of: key)
                }
            }
        }
    }

    /// At shutdown: this host's connection lifetimes end with it (their creators' connections
    /// are to this daemon); TTL lifetimes stay, in etcd.
    func stopLifetimes() {
        lifetimes.keeper?.revokeAll()
        lifetimes.kept = [:]
    }
}
