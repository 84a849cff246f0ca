import DBus
import Dispatch
import PropBus
import PropBusSystem
import SystemKit

/// Leased overrides (`Manager.Override`, `ReleaseOverride`) and ephemeral keys (CreateProperty's
/// `lifetime`): docs/layers.md, "Overrides". Their TTLs end on one timer on the service's queue,
/// armed for the earliest end; their connection lifetimes end on NameOwnerChanged.
extension Service {
    /// The longest TTL or lifetime accepted, in seconds (a year): a lease is a temporary change.
    static let maximumLeaseSeconds: Double = 365 * 24 * 3600

    /// The wall clock, nanoseconds since the epoch (UTC): TTL ends are kept across restarts.
    package static func wallClockNow() -> UInt64 {
        let now = WallClockTime.now()
        return UInt64(max(0, now.seconds)) * 1_000_000_000 + UInt64(max(0, now.nanoseconds))
    }

    /// A number of seconds (any numeric type: `u`, `d`, …) as nanoseconds, for `option` of `key`.
    static func leaseDuration(_ raw: DBusValue, option: String, of key: String) throws(PropBusError) -> UInt64 {
        guard let seconds = raw.unwrappingVariant.numericValue, seconds.isFinite, seconds > 0, seconds <= maximumLeaseSeconds else {
            throw PropBusError(.invalidArgs, "option '\(option)' for \(key) must be a number of seconds (u or d) above 0 and at most \(Int(maximumLeaseSeconds)) (a year), got type '\(raw.unwrappingVariant.signature)'")
        }
        return UInt64((seconds * 1e9).rounded())
    }

    /// `Override`'s options: the TTL in nanoseconds, or `nil` (the holder's connection).
    static func overrideTTL(_ options: [String: DBusValue], of key: String) throws(PropBusError) -> UInt64? {
        for name in options.keys.sorted() where name != "ttl" {
            throw PropBusError(.invalidArgs, "unknown option '\(name)' for Override of \(key); expected: ttl (seconds)")
        }
        return try options["ttl"].map { raw throws(PropBusError) in try leaseDuration(raw, option: "ttl", of: key) }
    }

    /// CreateProperty's `lifetime`: `nil` for `"connection"`, else the TTL in nanoseconds.
    static func keyLifetime(_ raw: DBusValue, of key: String) throws(PropBusError) -> UInt64? {
        if case .string(let text) = raw.unwrappingVariant {
            guard text == "connection" else {
                throw PropBusError(.invalidArgs, "option 'lifetime' for \(key) must be \"connection\" or a number of seconds, got \"\(text)\"")
            }
            return nil
        }
        return try leaseDuration(raw, option: "lifetime", of: key)
    }

    /// Whether CreateProperty's `options` (or the key as it exists) make `keyText` a fleet key.
    func isFleetScoped(_ keyText: String, options: [String: DBusValue]) -> Bool {
        let existing = (try? Key(keyText)).flatMap { model.entry(for: $0) }
        let scope = options["scope"]?.unwrappingVariant.stringValue ?? existing?.definition.scope.rawValue
        return scope == PropertyScope.fleet.rawValue
    }

    /// Refuses a `lifetime` the key cannot have: a fleet key's without a gate (its lifetime is
    /// a lease the gate takes), a fleet key's that exists already (the lease is the key's from
    /// its creation), or one for a key that exists without one.
    func checkLifetime(of keyText: String, options: [String: DBusValue]) throws(PropBusError) {
        let key = try Key(keyText)
        let existing = model.entry(for: key)
        if isFleetScoped(keyText, options: options) {
            guard gate != nil else {
                throw PropBusError(.invalidArgs, "option 'lifetime' for \(key): a fleet key (scope fleet) is ephemeral through an etcd lease, and propbusd runs without --fleet")
            }
            if existing != nil {
                throw PropBusError(.exists, "option 'lifetime' for \(key): the fleet key exists already; only the CreateProperty that creates a fleet key gives it a lifetime (delete it first)")
            }
            return
        }
        if existing != nil, model.leases.keyLeases[key] == nil {
            throw PropBusError(.exists, "option 'lifetime' for \(key): the key exists already without a lifetime; only the CreateProperty that creates a key gives it one (delete it first)")
        }
    }

    /// Who holds what a call takes: its connection, uid, pid and process name (`comm`), from
    /// the call's origin (`/proc` is read once, and not at all without a pid).
    func leaseHolder(of origin: WriteSet.Origin, call: MethodCall) -> LeaseHolder {
        guard var caller = origin.caller else { return LeaseHolder(busName: call.sender) }
        if caller.command == nil, caller.processID != nil { caller = CallerProcess.describe(caller) }
        return LeaseHolder(busName: caller.busName, userID: caller.userID, processID: caller.processID, command: caller.command)
    }

    /// Runs `body` with the caller's credentials: the tree's when access checks or history's
    /// attribution looked them up (once per connection), else asked of the bus (describe names
    /// an override's pid and process), answering later.
    private func withCredentials(of call: MethodCall, _ body: @escaping (Credentials?) throws(DBusError) -> [DBusValue]) throws(DBusError) -> MethodResult {
        if let known = call.credentials ?? call.identity { return .reply(try body(known)) }
        if call.sender.isEmpty { return .reply(try body(nil)) }
        let message: Message
        do {
            message = try Message.methodCall(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                             interface: "org.freedesktop.DBus", member: "GetConnectionCredentials")
            try message.append(.string(call.sender))
        } catch {
            return .reply(try body(nil))
        }
        tree.connection.call(message) { [weak self] result in
            guard let self else { return }
            // A holder already gone cannot hold anything: its NameOwnerChanged has come or comes next.
            guard case .success(let reply) = result, let entries = try? reply.arguments().first?.stringKeyedEntries,
                  let credentials = try? Credentials(reply: entries) else {
                call.fail(PropBusError(.unavailable, "\(call.sender) left the bus before its \(call.message.member ?? "call") was made").dbusError)
                return
            }
            do throws(DBusError) { call.reply(try body(credentials)) } catch { call.fail(error) }
            tree.connection.scheduleRound()
        }
        return .deferred
    }

    /// `Override` and `ReleaseOverride` of the Manager interface.
    func overrideMethods() -> [MethodDescription] {
        [
            MethodDescription("Override", in: [("key", .string), ("value", .variant), ("options", .dictionary(key: .string, value: .variant))],
                              out: [("handle", .uint64)], writes: true, access: .write(.argument("key"))) { [unowned self] call throws(DBusError) in
                let key = try call.string("key")
                let value = try call.argument("value").unwrappingVariantOnce
                let overrideOptions = try call.dictionary("options")
                let ttl = try bridged { () throws(PropBusError) in try Self.overrideTTL(overrideOptions, of: key) }
                return try withCredentials(of: call) { [unowned self] credentials throws(DBusError) in
                    // An override is a round of its own, with the call as its origin (history).
                    let origin = origin(of: call, credentials: credentials)
                    model.origin = origin
                    defer { model.origin = .daemon }
                    let now = Self.wallClockNow()
                    let holder = leaseHolder(of: origin, call: call)
                    let made = try bridged { () throws(PropBusError) in
                        try model.override(key, with: value, holder: holder, now: now, expires: ttl.map { now + $0 })
                    }
                    publish(made.changes)
                    armLeaseTimer()
                    return [.uint64(made.handle)]
                }
            },
            MethodDescription("ReleaseOverride", in: [("handle", .uint64)], writes: true,
                              access: .custom { [unowned self] call throws(DBusError) in
                                  // An unknown handle passes: the handler reports it as it would to anyone.
                                  guard case .uint64(let handle) = try call.argument("handle"), let (key, hold) = model.override(handle) else { return }
                                  // Its holder's connection, or anyone who may write the key (who could have made it).
                                  if hold.holder == call.sender { return }
                                  try authorizeWrite(existing: key.text, by: call)
                              }) { [unowned self] call throws(DBusError) in
                guard case .uint64(let handle) = try call.argument("handle") else { throw .invalidArgs("ReleaseOverride expects (t handle)") }
                model.origin = origin(of: call)
                defer { model.origin = .daemon }
                publish(try bridged { () throws(PropBusError) in try model.releaseOverride(handle) })
                armLeaseTimer()
                return .reply([])
            },
        ]
    }

    /// Ends what a connection that left the bus held without a TTL (NameOwnerChanged).
    func endLeases(heldBy name: String) {
        publish(model.endLeases(heldBy: name))
        // The leases it holds through the gate end there; their keys' deletion comes back through it.
        gate?.endLeasedKeys(heldBy: name)
    }

    /// Once the name is owned: deletes the ephemeral keys whose creator's connection was to the
    /// daemon before this start, and starts the TTL timer (a lease that ended while the daemon was
    /// stopped ends now), so that clients see both.
    public func startLeases() {
        dispatchPrecondition(condition: .onQueue(tree.connection.queue))
        leasesStarted = true
        publish(model.endLeasesOfPreviousRun())
        armLeaseTimer()
        tree.connection.scheduleRound()
    }

    /// Waits for the earliest TTL end, if any (one timer, re-armed when the earliest changes).
    func armLeaseTimer() {
        guard leasesStarted else { return }
        guard let next = model.leases.nextExpiry else {
            leaseTimer?.cancel()
            leaseTimer = nil
            leaseTimerDeadline = nil
            return
        }
        if leaseTimerDeadline == next { return }
        leaseTimer?.cancel()
        let now = Self.wallClockNow()
        let delay = next > now ? next - now : 0
        let timer = DispatchSource.makeTimerSource(queue: tree.connection.queue)
        timer.schedule(deadline: .now() + .nanoseconds(Int(min(delay, UInt64(Int.max)))), leeway: .milliseconds(5))
        timer.setEventHandler { [weak self] in self?.leaseTimerFired() }
        timer.resume()
        leaseTimer = timer
        leaseTimerDeadline = next
    }

    private func leaseTimerFired() {
        leaseTimer?.cancel()
        leaseTimer = nil
        leaseTimerDeadline = nil
        // Ends on the wall clock: a timer that fired early (the clock was set back) re-arms.
        publish(model.endExpiredLeases(now: Self.wallClockNow()))
        tree.connection.scheduleRound()
        armLeaseTimer()
    }

    /// `ListProperties`' `overrides`: one `a{sv}` per holder, oldest first (the last one shows).
    static func overridesMetadata(_ holds: [OverrideHold], secret: Bool) -> DBusValue {
        .array(of: .dictionary(key: .string, value: .variant), holds.map { hold in
            var items = leaseItems(handle: hold.handle, holder: hold.leaseHolder, since: hold.since, expires: hold.expires)
            if !secret { items["value"] = hold.value }
            return .vardict(items)
        })
    }

    /// `ListProperties`' `lifetime` of an ephemeral key: its holder, since, and its end (TTL).
    static func lifetimeMetadata(_ lease: Lease) -> DBusValue {
        .vardict(leaseItems(handle: lease.handle, holder: lease.holder, since: lease.since, expires: lease.expires))
    }

    /// What describe shows of a lease: handle, holder (bus name, uid, pid, comm), since, expires.
    private static func leaseItems(handle: UInt64, holder: LeaseHolder, since: UInt64, expires: UInt64?) -> [String: DBusValue] {
        var items: [String: DBusValue] = ["handle": .uint64(handle), "holder": .string(holder.busName), "since": .uint64(since)]
        if let expires { items["expires"] = .uint64(expires) }
        if let uid = holder.userID { items["uid"] = .uint32(uid) }
        if let pid = holder.processID { items["pid"] = .uint32(pid) }
        if let command = holder.command { items["comm"] = .string(command) }
        if let host = holder.host { items["host"] = .string(host) }
        return items
    }
}
