import CDBus
import Dispatch
import Glibc

/// The objects one connection exports, with the standard interfaces derived for each.
///
/// Every method call is routed here. Unknown objects, interfaces, methods and properties get the
/// standard error reply at once, so no client ever waits for a timeout.
///
/// Work produced during a dispatch round is held back and flushed when the round ends, after the
/// ``beforeFlush`` hooks ran (that is where a store commits): first InterfacesAdded/Removed,
/// then one coalesced PropertiesChanged per object and interface (with no-op changes dropped),
/// then the method replies. A client that gets a reply has therefore already been sent the
/// signals for the change it made.
///
/// A hook can fail the round (a store that cannot commit): then the replies of the round's
/// successful write calls become the hook's error, and the round's pending signals are dropped,
/// since they describe changes the hook undid. Write calls are `Properties.Set` and the methods
/// whose description says it ``MethodDescription/writes``.
///
/// With ``requiresCredentials`` on, each call is routed only once its sender's credentials are
/// known (``MethodCall/credentials``): a sender's calls wait, in order, for the first lookup,
/// while other senders' calls go on.
///
/// `@unchecked Sendable`: confined to the connection's queue, like the connection itself.
public final class ObjectTree: @unchecked Sendable {
    // Members are internal rather than private: routing, flushing and the tree's structure are
    // extensions in ObjectTree+Routing/+Flush/+Structure.swift. Nothing outside DBus sees them.
    /// The connection the objects are exported on.
    public let connection: Connection
    var objects: [String: ExportedObject] = [:]
    var managerPaths: Set<String> = []
    var pendingEvents: [() -> [Message]] = []
    var pendingChanges: [ChangeKey: [String: DBusValue?]] = [:]
    var pendingChangeOrder: [ChangeKey] = []
    var pendingReplies: [PendingReply] = []
    /// Whether the round handled a write call, which must reach the hooks even without a reply.
    var roundHasWrites = false
    /// How many of ``pendingReplies`` answer a `Get` the tree read from a computed table itself
    /// (``answeredGet(_:object:credentials:)``): no handler ran for them, so a round holding
    /// nothing else leaves the before-flush hooks (a commit) nothing to do and skips them.
    var fastReadReplies = 0
    var beforeFlushHooks: [() -> DBusError?] = []
    /// Set by ``refuseCalls(with:)``: the answer to every method call from then on.
    var refusal: DBusError?


    struct PendingReply {
        var message: Message
        /// The call of a successful write, kept so a failed commit can still answer it with an error.
        var writeCall: Message?
    }
    /// The largest message this tree sends, headers included: the bus disconnects a sender
    /// whose message is above its `max_message_size` (32 MiB on the system bus), so every reply
    /// and signal is sized before it is built. Never above the protocol's 128 MiB.
    public var maximumMessageSize: Int = 32 << 20 {
        didSet { maximumMessageSize = min(max(maximumMessageSize, 4096), Self.protocolMessageLimit) }
    }
    /// The protocol's limits: a message, and one array inside it.
    public static let protocolMessageLimit = 128 << 20
    public static let protocolArrayLimit = 64 << 20
    /// Room left for the header fields (path, interface, member, names, signature).
    static let headerAllowance = 2048

    /// The error that replaces a reply too big to send: `size` is what the reply would have
    /// been, `limit` the largest message allowed. The service sets it to say how to narrow the
    /// call; by default `org.freedesktop.DBus.Error.LimitsExceeded`.
    public var replyTooLarge: (_ call: Message, _ size: MessageSize, _ limit: Int) -> DBusError = { call, size, limit in
        DBusError(name: DBusError.Name.limitsExceeded, message: "the reply to \(call.member ?? "the call") \(size.excess(over: limit) ?? "is too big")")
    }

    /// Asked before a successful reply of `size` bytes (its body and a typical header) is queued for the
    /// sender of `call`, with the sender's credentials once ``requiresCredentials`` is on; an
    /// error it returns is sent instead of the reply. Not asked for the reply of a method that
    /// writes (``MethodDescription/writes``): that write took effect, and an error would say
    /// otherwise. A bus holds what a slow reader has not
    /// read yet against the *sending* connection (dbus-daemon stops reading from a sender past
    /// its `max_incoming_bytes`), so a service can charge reply bytes to their reader here.
    /// Runs on the connection's queue.
    public var replyAdmission: ((_ call: Message, _ credentials: Credentials?, _ size: Int) -> DBusError?)?

    /// Reports what the tree had to leave out of a signal that was too big; the daemon logs it.
    public var onOversizedSignal: ((String) -> Void)?

    /// Asked before a call that writes (``MethodDescription/writes``, `isWrite`) or any other
    /// runs, after its access check: an error it returns is the reply and the handler never
    /// runs (a caller past its quota of bytes sent is refused before it causes more).
    public var callAdmission: ((_ call: MethodCall, _ isWrite: Bool) -> DBusError?)?
    /// How large a value change signals carry, and which calls caused the round's signals.
    public let signalCharges = SignalCharges()
    /// Decides whether a call may run a method whose description declares a privilege
    /// (``MethodDescription/access``), throwing the error to reply with (`AccessDenied`). Runs
    /// on the connection's queue, before the handler.
    public var accessCheck: ((MethodAccess, MethodCall) throws(DBusError) -> Void)?

    /// Told of every call answered with an error, before the error goes out (the service
    /// records refused attempts). Runs on the connection's queue.
    public var onRefusal: ((MethodCall, DBusError) -> Void)?

    /// Caller credentials, once ``requiresCredentials`` was turned on.
    var credentialCache: CredentialCache?
    /// The standard interfaces, built once; their handlers read the path from the call.
    private(set) lazy var standard = StandardInterfaces(tree: self)

    struct ChangeKey: Hashable {
        var path: String
        var interface: String
    }

    /// Starts routing the connection's method calls to this tree. Call on the connection's queue.
    public init(connection: Connection) {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        self.connection = connection
        // Weak: a tree dropped before its connection (a client giving up) must not crash the
        // next round; its calls then get no handler, like calls to a connection without objects.
        connection.methodCallHandler = { [weak self] in self?.handle($0) }
        connection.addRoundEndHandler { [weak self] in self?.flush() }
        connection.roundIsFull = { [weak self] in (self?.pendingReplyBytes ?? 0) >= Self.replyBytesPerRound }
    }

    /// Bytes of replies a round may hold before it ends and sends them: with the connection's
    /// per-round call budget, this bounds the memory replies take and how long one client's
    /// backlog delays the others.
    public static let replyBytesPerRound = 4 << 20
    /// The reply list's storage kept from one round to the next (a round serves 64 calls at most,
    /// deferred replies aside).
    static let keptReplyCapacity = 128
    /// Bytes of the replies queued in this round.
    var pendingReplyBytes = 0

    // MARK: Credentials

    /// Whether every method call waits for its sender's credentials before it is routed, so
    /// handlers can decide by ``MethodCall/credentials``. Off by default: no lookups at all.
    ///
    /// Turn it on before the bus name is owned. Cached credentials are forgotten on the bus's
    /// `NameOwnerChanged`, so subscribe to ``credentialsMatchRule`` (`AddMatch`) too. A call whose
    /// sender cannot be looked up (it left the bus first) is answered with `AccessDenied`.
    public var requiresCredentials = false {
        didSet { updateCredentialCache() }
    }

    /// Whether every method call waits for its sender's credentials only to say who called
    /// (``MethodCall/identity``): looked up once per connection, like ``requiresCredentials``,
    /// but a sender that cannot be looked up is still served (without an identity), and
    /// ``MethodCall/credentials`` stays `nil` unless ``requiresCredentials`` is on too.
    public var attributesCalls = false {
        didSet { updateCredentialCache() }
    }

    func updateCredentialCache() {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        let needed = requiresCredentials || attributesCalls
        if needed, credentialCache == nil { credentialCache = CredentialCache(connection: connection) }
        if !needed { credentialCache = nil }
    }

    /// The signal the credential cache needs to forget names that left the bus.
    public static var credentialsMatchRule: MatchRule { CredentialCache.nameOwnerChangedRule }

    // MARK: Registration

    /// Exports an object at `path`. Emits InterfacesAdded if an object manager is above it,
    /// unless `announce` is false: for objects exported before the service owns its bus name,
    /// whose signals nobody following the name could receive (ObjectManager clients call
    /// GetManagedObjects when the name gets an owner), so building them is wasted start-up work.
    public func export(_ object: ExportedObject, at path: String, announce: Bool = true) {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        objects[path] = object
        if announce, let manager = manager(above: path) {
            pendingEvents.append { [unowned self] in
                guard let object = objects[path] else { return [] }
                let interfaces = object.interfaces()
                // A broadcast: restricted properties are left out (no caller to check).
                let dictionaries = interfaces.map { ($0, propertyDictionary($0, for: nil)) }
                func added(_ entries: [(InterfaceDescription, DBusValue)]) -> [DBusValue] {
                    [.objectPath(path), .dictionary(key: .string, value: .dictionary(key: .string, value: .variant),
                                                    entries.map { DictionaryEntry(.string($0.0.name), $0.1) })]
                }
                let full = added(dictionaries)
                guard let excess = messageSize(full, path: path, member: "InterfacesAdded").excess(over: maximumMessageSize) else {
                    var messages = signal(manager, "org.freedesktop.DBus.ObjectManager", "InterfacesAdded", full).map { [$0] } ?? []
                    // A plain proxy on `path` (GDBusProxy, Qt) made before the object existed
                    // hears only PropertiesChanged on its own path: announce the values there too
                    // (restricted ones by name), each part of the InterfacesAdded that fit.
                    for (interface, dictionary) in dictionaries {
                        guard case .dictionary(let keyType, let valueType, let entries) = dictionary else { continue }
                        // Only what PropertiesChanged may carry: no `const` or unsignalled property.
                        let signalled = signalledProperties(interface, inBroadcast: Set(entries.compactMap(\.key.stringValue)))
                        let shown = entries.filter { $0.key.stringValue.map { signalled[$0] == .emits } ?? false }
                        let hidden = signalled.filter { $0.value == .invalidates }.map(\.key).sorted()
                        guard !shown.isEmpty || !hidden.isEmpty,
                              let announcement = signal(path, "org.freedesktop.DBus.Properties", "PropertiesChanged",
                                                        [.string(interface.name), .dictionary(key: keyType, value: valueType, shown),
                                                         .array(of: .string, hidden.map { .string($0) })])
                        else { continue }
                        messages.append(announcement)
                    }
                    return messages
                }
                // Too big for one message (a store written under a larger limit): announce the
                // object with empty property sets, then invalidate every property so clients
                // re-read them one by one. Start-up must never be blocked by one big group.
                let empty = DBusValue.dictionary(key: .string, value: .variant, [])
                var messages = signal(manager, "org.freedesktop.DBus.ObjectManager", "InterfacesAdded",
                                      added(dictionaries.map { ($0.0, empty) })).map { [$0] } ?? []
                for (interface, dictionary) in dictionaries {
                    guard case .dictionary(_, _, let entries) = dictionary, !entries.isEmpty else { continue }
                    if let invalidation = signal(path, "org.freedesktop.DBus.Properties", "PropertiesChanged",
                                                 [.string(interface.name), empty, .array(of: .string, entries.map(\.key))]) {
                        messages.append(invalidation)
                    }
                }
                onOversizedSignal?("InterfacesAdded for \(path) \(excess): sent without values, with every property invalidated")
                return messages
            }
        }
    }

    /// Removes the object at `path`. Emits InterfacesRemoved if an object manager is above it.
    public func unexport(_ path: String) {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        guard let object = objects.removeValue(forKey: path) else { return }
        let interfaces = object.interfaces()
        let names = interfaces.map(\.name)
        // A plain proxy on `path` keeps its cached values until they are invalidated on `path`
        // itself: every property the object has, and those noted this round (a last property
        // removed just before its object goes is no longer among its names).
        var gone: [(interface: String, properties: [String])] = []
        for interface in interfaces {
            var properties = propertyNames(interface)
            let noted = pendingChanges[ChangeKey(path: path, interface: interface.name)].map { Array($0.keys) } ?? []
            properties += noted.filter { !properties.contains($0) }.sorted()
            if !properties.isEmpty { gone.append((interface.name, properties)) }
        }
        pendingChangeOrder.removeAll { $0.path == path }
        pendingChanges = pendingChanges.filter { $0.key.path != path }
        if let manager = manager(above: path) {
            pendingEvents.append { [unowned self] in
                let empty = DBusValue.dictionary(key: .string, value: .variant, [])
                var messages = gone.compactMap { interface, properties in
                    signal(path, "org.freedesktop.DBus.Properties", "PropertiesChanged",
                           [.string(interface), empty, .array(of: .string, properties.map { .string($0) })])
                }
                messages += signal(manager, "org.freedesktop.DBus.ObjectManager", "InterfacesRemoved",
                                   [.objectPath(path), .array(of: .string, names.map { .string($0) })]).map { [$0] } ?? []
                return messages
            }
        }
    }

    /// The object exported at `path`, if any.
    public func object(at path: String) -> ExportedObject? {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        return objects[path]
    }

    /// Makes the object at `path` (existing or not) an `org.freedesktop.DBus.ObjectManager` for
    /// everything below it.
    public func addObjectManager(at path: String) {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        managerPaths.insert(path)
    }

    /// Runs before each flush, after the round's messages were handled; e.g. a store's commit.
    /// Not for a round whose only work was answering `Get`s from computed tables, which runs no
    /// handler and changes nothing.
    ///
    /// Returning an error fails the round's successful writes with it and drops the round's
    /// pending signals; the hook must itself have undone the round's changes.
    public func addBeforeFlushHook(_ hook: @escaping () -> DBusError?) {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        beforeFlushHooks.append(hook)
    }


    /// Answers every method call from now on with `error`, before any routing or handler: for a
    /// service that is shutting down and must not change anything after its last commit.
    /// Replies already queued and deferred replies still go out.
    public func refuseCalls(with error: DBusError) {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        refusal = error
    }

    // MARK: Change notification

    /// Notes that a property may have changed; `oldValue` is its value before the change.
    /// A property noted and then gone from its interface is listed as invalidated.
    ///
    /// At the end of the round the current value is compared with the oldest noted value, and
    /// the change is dropped if they are equal (GDBus's no-op rule).
    public func noteChange(path: String, interface: String, property: String, oldValue: DBusValue?) {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        let key = ChangeKey(path: path, interface: interface)
        if pendingChanges[key] == nil {
            pendingChanges[key] = [:]
            pendingChangeOrder.append(key)
        }
        if pendingChanges[key]![property] == nil {
            pendingChanges[key]![property] = .some(oldValue)
        }
        signalCharges.noted(key)
    }

    /// Queues a signal to go out with the round's other signals, charged to `cause` (the call
    /// being handled when `nil`, if any).
    public func emitAtFlush(path: String, interface: String, member: String, _ arguments: [DBusValue], chargedTo cause: SignalCause? = nil) {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        let causes = (cause ?? signalCharges.current).map { Set([$0]) } ?? []
        pendingEvents.append { [unowned self] in
            guard let message = signal(path, interface, member, arguments) else { return [] }
            signalCharges.charge(causes, counting: connection.backlog) { Self.sentBytes(messageSize(arguments, path: path, member: member)) }
            return [message]
        }
    }
}
