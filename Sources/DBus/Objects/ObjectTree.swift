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
    /// The connection the objects are exported on.
    public let connection: Connection
    private var objects: [String: ExportedObject] = [:]
    private var managerPaths: Set<String> = []
    private var pendingEvents: [() -> [Message]] = []
    private var pendingChanges: [ChangeKey: [String: DBusValue?]] = [:]
    private var pendingChangeOrder: [ChangeKey] = []
    private var pendingReplies: [PendingReply] = []
    /// Whether the round handled a write call, which must reach the hooks even without a reply.
    private var roundHasWrites = false
    /// How many of ``pendingReplies`` answer a `Get` the tree read from a computed table itself
    /// (``answeredGet(_:object:credentials:)``): no handler ran for them, so a round holding
    /// nothing else leaves the before-flush hooks (a commit) nothing to do and skips them.
    private var fastReadReplies = 0
    private var beforeFlushHooks: [() -> DBusError?] = []
    /// Set by ``refuseCalls(with:)``: the answer to every method call from then on.
    private var refusal: DBusError?


    private struct PendingReply {
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
    private static let headerAllowance = 2048

    /// The error that replaces a reply too big to send: `size` is what the reply would have
    /// been, `limit` the largest message allowed. The service sets it to say how to narrow the
    /// call; by default `org.freedesktop.DBus.Error.LimitsExceeded`.
    public var replyTooLarge: (_ call: Message, _ size: MessageSize, _ limit: Int) -> DBusError = { call, size, limit in
        DBusError(name: DBusError.Name.limitsExceeded, message: "the reply to \(call.member ?? "the call") \(size.excess(over: limit) ?? "is too big")")
    }

    /// Asked before a successful reply of `size` bytes (headers included) is queued for the
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
    /// Decides whether a call may run a method whose description declares a privilege
    /// (``MethodDescription/access``), throwing the error to reply with (`AccessDenied`). Runs
    /// on the connection's queue, before the handler.
    public var accessCheck: ((MethodAccess, MethodCall) throws(DBusError) -> Void)?

    /// Told of every call answered with an error, before the error goes out (the service
    /// records refused attempts). Runs on the connection's queue.
    public var onRefusal: ((MethodCall, DBusError) -> Void)?

    /// Caller credentials, once ``requiresCredentials`` was turned on.
    private var credentialCache: CredentialCache?
    /// The standard interfaces, built once; their handlers read the path from the call.
    private(set) lazy var standard = StandardInterfaces(tree: self)

    private struct ChangeKey: Hashable {
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
    private var pendingReplyBytes = 0

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

    private func updateCredentialCache() {
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
    }

    /// Queues a signal to go out with the round's other signals.
    public func emitAtFlush(path: String, interface: String, member: String, _ arguments: [DBusValue]) {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        pendingEvents.append { [unowned self] in signal(path, interface, member, arguments).map { [$0] } ?? [] }
    }

    // MARK: Routing

    private func handle(_ message: Message) {
        if let refusal {
            reply(to: message, .failure(refusal))
            return
        }
        guard let credentialCache, let sender = message.sender else {
            route(message, credentials: nil)
            return
        }
        // Known after a connection's first call: routed at once, without a closure per call.
        if let known = credentialCache.cached(sender) {
            route(message, credentials: known)
            return
        }
        credentialCache.withCredentials(of: sender) { [unowned self] result in
            switch result {
            case .success(let credentials):
                route(message, credentials: credentials)
            case .failure where !requiresCredentials:
                route(message, credentials: nil)
            case .failure(let error):
                reply(to: message, .failure(DBusError(name: DBusError.Name.accessDenied,
                                                      message: "cannot look up the credentials of \(sender): \(error.message)")))
            }
        }
    }

    private func route(_ message: Message, credentials identity: Credentials?) {
        // Decided and charged by only when the tree requires credentials; else they only name the caller.
        let credentials = requiresCredentials ? identity : nil
        // Fds the call carried are closed once it was handled, whatever the outcome; a handler
        // that keeps one takes it first (MethodCall.takeUnixFD).
        defer { message.closeReceivedFDs() }
        let path = message.path ?? "/"
        let member = message.member ?? ""
        let object = objects[path]
        if let object, answeredGet(message, object: object, credentials: credentials) { return }
        guard object != nil || isIntermediateNode(path) else {
            reply(to: message, .failure(.unknownObject("No such object path '\(path)'")))
            return
        }
        let method: MethodDescription?
        if let interfaceName = message.interface {
            // The method alone: copying the whole description would retain each of its tables.
            guard let found = lookUpMethod(member, interface: interfaceName, at: path, object: object) else {
                reply(to: message, .failure(.unknownInterface("No such interface '\(interfaceName)' at object path '\(path)'")))
                return
            }
            method = found
        } else {
            let all = standardInterfaces(for: path, exported: object != nil) + (object?.interfaces() ?? [])
            method = all.lazy.compactMap { $0.methods[member] }.first
        }
        guard let method else {
            reply(to: message, .failure(.unknownMethod(
                "No such method '\(member)' in interface '\(message.interface ?? "(any)")' at object path '\(path)' (signature '\(message.signature)')")))
            return
        }
        let signature = message.signature
        guard signature == method.inSignature else {
            reply(to: message, .failure(.invalidArgs(
                "Invalid arguments '\(signature)' to call \(message.interface ?? "").\(member)(), expecting '\(method.inSignature)'")))
            return
        }
        var built: MethodCall?
        do throws(DBusError) {
            let call = MethodCall(message: message, arguments: try message.arguments(), argumentDescriptions: method.inArguments,
                                  credentials: credentials, identity: identity, tree: self, path: path)
            built = call
            // Before the handler, so a denied call changes nothing. A declared privilege with no
            // check installed is refused: the declaration says someone must decide.
            if !method.access.isNone {
                guard let accessCheck else {
                    throw DBusError(name: DBusError.Name.accessDenied, message: "\(member) needs a privilege and this service checks none")
                }
                try accessCheck(method.access, call)
            }
            let isWrite = method.writes
            if isWrite { roundHasWrites = true }
            switch try method.handler(call) {
            case .reply(let values): reply(to: message, .success(values), isWrite: isWrite, credentials: credentials)
            case .stream(let body): reply(to: message, streaming: body, isWrite: isWrite, credentials: credentials)
            case .deferred: break
            }
        } catch {
            if let built, let onRefusal { onRefusal(built, error) }
            reply(to: message, .failure(error))
        }
    }

    /// Answers `org.freedesktop.DBus.Properties.Get(s interface, s property)` from a computed
    /// table (``ComputedProperties/value``) straight from the message: the two strings are read
    /// as C strings, the interface found by comparing bytes, and the variant written into the
    /// reply, with no ``MethodCall``, argument array or interface description built. Every
    /// other case returns `false` and takes the general path, which gives the same answers and
    /// the standard errors: an unknown or restricted property, an empty interface name, another
    /// kind of table, an object that exports its own `org.freedesktop.DBus.Properties`. `Get`
    /// declares no privilege, so there is no access check to keep here.
    private func answeredGet(_ message: Message, object: ExportedObject, credentials: Credentials?) -> Bool {
        let raw = message.raw
        guard dbus_message_is_method_call(raw, Self.propertiesInterface, "Get") != 0,
              dbus_message_has_signature(raw, "ss") != 0 else { return false }
        var iterator = DBusMessageIter()
        guard dbus_message_iter_init(raw, &iterator) != 0 else { return false }
        var interfaceName: UnsafePointer<CChar>?
        dbus_message_iter_get_basic(&iterator, &interfaceName)
        guard dbus_message_iter_next(&iterator) != 0 else { return false }
        var propertyName: UnsafePointer<CChar>?
        dbus_message_iter_get_basic(&iterator, &propertyName)
        guard let interfaceName, let propertyName, interfaceName.pointee != 0,
              let read = object.valueReader(interface: interfaceName),
              let value = read(String(cString: propertyName)) else { return false }
        let queued = pendingReplies.count
        reply(to: message, bufferedSignature: nil, credentials: credentials) { $0.variant(value) }
        fastReadReplies += pendingReplies.count - queued
        return true
    }

    static let propertiesInterface = "org.freedesktop.DBus.Properties"

    /// The interface `name` at `path`: the object's own first, then the standard ones.
    func interface(named name: String, at path: String, object: ExportedObject?) -> InterfaceDescription? {
        if let own = object?.interface(named: name) { return own }
        switch name {
        case standard.peer.name: return standard.peer
        case standard.introspectable.name: return standard.introspectable
        case standard.properties.name: return object != nil ? standard.properties : nil
        case standard.objectManager.name: return isObjectManager(path) ? standard.objectManager : nil
        default: return nil
        }
    }

    /// `member` of the interface `name` at `path` (as ``interface(named:at:object:)`` finds it):
    /// `nil` when there is no such interface, `.some(nil)` when it has no such method.
    private func lookUpMethod(_ member: String, interface name: String, at path: String, object: ExportedObject?) -> MethodDescription?? {
        if let object {
            let own = object.interfaces()
            for index in own.indices where own[index].name == name { return .some(own[index].methods[member]) }
        }
        switch name {
        case standard.peer.name: return .some(standard.peer.methods[member])
        case standard.introspectable.name: return .some(standard.introspectable.methods[member])
        case standard.properties.name: return object != nil ? .some(standard.properties.methods[member]) : nil
        case standard.objectManager.name: return isObjectManager(path) ? .some(standard.objectManager.methods[member]) : nil
        default: return nil
        }
    }

    private func reply(to message: Message, _ result: Result<[DBusValue], DBusError>, isWrite: Bool = false,
                       credentials: Credentials? = nil) {
        guard !message.noReply else { return }
        var reply: Message?
        var result = result
        if case .success(let values) = result {
            let size = messageSize(values, path: "", member: "")
            if size.excess(over: maximumMessageSize) != nil {
                result = .failure(replyTooLarge(message, size, maximumMessageSize))
            } else if !isWrite, let refusal = replyAdmission?(message, credentials, size.bytes) {
                result = .failure(refusal)
            } else {
                pendingReplyBytes += size.bytes
            }
        }
        switch result {
        case .success(let values):
            reply = message.makeReturn()
            do {
                try reply?.append(values)
            } catch {
                reply = message.makeError(.failed("cannot encode the reply: \(error.message)"))
            }
        case .failure(let error):
            reply = message.makeError(error)
        }
        if let reply { pendingReplies.append(PendingReply(message: reply, writeCall: isWrite ? message : nil)) }
    }

    /// Sends what is pending (InterfacesAdded/Removed, PropertiesChanged, replies) now, after the
    /// before-flush hooks, as the end of a dispatch round does: for work that ends outside any
    /// round (an answer or an update from another thread, handed over with `queue.sync`), which
    /// would otherwise wait for a round scheduled behind it, one thread wake-up later.
    public func flushNow() {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        flush()
    }

    /// Replies with a body written straight into the message (or, for a buffered body, into a
    /// buffer the message is then made from, with one check by libdbus). The writer stops appending at the
    /// message limit and only counts the rest, so a reply too big to send becomes
    /// ``replyTooLarge`` (with its whole size) having built no more than the limit.
    private func reply(to message: Message, streaming body: ReplyBody, isWrite: Bool = false, credentials: Credentials? = nil) {
        reply(to: message, bufferedSignature: body.bufferedSignature, isWrite: isWrite, credentials: credentials, writing: body.write)
    }

    /// ``reply(to:streaming:isWrite:credentials:)`` with the body's writer passed down, not
    /// stored: the fast `Get` answers without a ``ReplyBody`` (and its closure) per call.
    private func reply(to message: Message, bufferedSignature: String?, isWrite: Bool = false, credentials: Credentials? = nil,
                       writing write: (inout MessageBodyWriter) -> Void) {
        guard !message.noReply, let built = message.makeReturn() else { return }
        let limit = maximumMessageSize - Self.headerAllowance
        var writer = bufferedSignature == nil
            ? MessageBodyWriter.appending(to: built, limit: limit, arrayLimit: Self.protocolArrayLimit)
            : MessageBodyWriter.buffered(limit: limit, arrayLimit: Self.protocolArrayLimit)
        write(&writer)
        let size = MessageSize(bytes: writer.size + Self.headerAllowance, largestArray: writer.largestArray)
        guard size.excess(over: maximumMessageSize) == nil, !writer.overflowed else {
            reply(to: message, .failure(replyTooLarge(message, size, maximumMessageSize)))
            return
        }
        if writer.failure == nil, !isWrite, let refusal = replyAdmission?(message, credentials, size.bytes) {
            reply(to: message, .failure(refusal))
            return
        }
        var reply = built
        var failure = writer.failure
        if failure == nil, let signature = bufferedSignature, let buffer = writer.buffer {
            do throws(DBusError) { reply = try built.replacingBody(with: buffer, signature: signature) } catch { failure = error.message }
        }
        if let failure {
            guard let error = message.makeError(.failed("cannot encode the reply: \(failure)")) else { return }
            reply = error
        } else {
            pendingReplyBytes += size.bytes
        }
        pendingReplies.append(PendingReply(message: reply, writeCall: isWrite ? message : nil))
    }

    /// Queues a reply produced outside the call's own round (deferred handlers).
    func enqueueReply(to message: Message, _ result: Result<[DBusValue], DBusError>) {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        reply(to: message, result)
        connection.scheduleRound()
    }

    private func flush() {
        guard roundHasWrites || !pendingEvents.isEmpty || !pendingChangeOrder.isEmpty || !pendingReplies.isEmpty else { return }
        let ranHandlers = roundHasWrites || !pendingEvents.isEmpty || !pendingChangeOrder.isEmpty || pendingReplies.count > fastReadReplies
        roundHasWrites = false
        fastReadReplies = 0
        var failure: DBusError?
        for hook in beforeFlushHooks where ranHandlers {
            if let error = hook(), failure == nil { failure = error }
        }
        if let failure {
            pendingEvents = []
            pendingChangeOrder = []
            pendingChanges = [:]
            for index in pendingReplies.indices {
                if let call = pendingReplies[index].writeCall, let error = call.makeError(failure) {
                    pendingReplies[index].message = error
                }
            }
        }
        let events = pendingEvents
        pendingEvents = []
        for event in events { for message in event() { connection.send(message) } }
        for key in pendingChangeOrder {
            if let message = propertiesChanged(key, pendingChanges[key] ?? [:]) { connection.send(message) }
        }
        pendingChangeOrder = []
        pendingChanges = [:]
        var replies: [PendingReply] = []
        swap(&replies, &pendingReplies)
        pendingReplyBytes = 0
        for reply in replies { connection.send(reply.message) }
        // The emptied storage is reused: a fresh list per round would be an allocation per
        // synchronous call. (Unless a send hook queued a reply meanwhile: that one stays.)
        if pendingReplies.isEmpty, replies.capacity <= Self.keptReplyCapacity {
            replies.removeAll(keepingCapacity: true)
            pendingReplies = replies
        }
    }

    private func propertiesChanged(_ key: ChangeKey, _ changes: [String: DBusValue?]) -> Message? {
        guard let object = objects[key.path],
              let interface = object.interfaces().first(where: { $0.name == key.interface }) else { return nil }
        var changed: [DictionaryEntry] = []
        var invalidated: [DBusValue] = []
        var computedRead: ((String) -> (value: DBusValue, restricted: Bool)?)?
        if case .computed(let table) = interface.properties { computedRead = table.read }
        for (name, old) in changes.sorted(by: { $0.key < $1.key }) {
            if let computedRead {
                // A computed table's property emits its value unless restricted: read it in
                // place rather than describing it.
                guard let (current, restricted) = computedRead(name) else {
                    invalidated.append(.string(name))
                    continue
                }
                if current == old { continue }
                if restricted { invalidated.append(.string(name)) } else { changed.append(DictionaryEntry(.string(name), .variant(current))) }
                continue
            }
            guard let property = interface.properties.lookup(name) else {
                // Noted, then removed from an interface that remains: caches (GDBusProxy,
                // ObjectManager clients) forget a property only when told it is invalid.
                invalidated.append(.string(name))
                continue
            }
            guard let current = try? property.get() else { continue }
            if current == old { continue }
            switch property.changeSignal {
            // Anyone may receive the signal, so a restricted value is never carried in it.
            case .emits where property.authorizeRead != nil: invalidated.append(.string(name))
            case .emits: changed.append(DictionaryEntry(.string(name), .variant(current)))
            case .invalidates: invalidated.append(.string(name))
            case .const, .none: continue
            }
        }
        guard !changed.isEmpty || !invalidated.isEmpty else { return nil }
        var arguments: [DBusValue] = [.string(key.interface), .dictionary(key: .string, value: .variant, changed),
                                      .array(of: .string, invalidated)]
        if let excess = messageSize(arguments, path: key.path, member: "PropertiesChanged").excess(over: maximumMessageSize) {
            // The values do not fit: send the names only, so clients re-read what they need.
            arguments = [.string(key.interface), .dictionary(key: .string, value: .variant, []),
                         .array(of: .string, changed.map(\.key) + invalidated)]
            onOversizedSignal?("PropertiesChanged for \(key.path) \(excess): sent with the names as invalidated_properties")
        }
        return signal(key.path, "org.freedesktop.DBus.Properties", "PropertiesChanged", arguments)
    }

    /// Builds a signal, or `nil` when it cannot be sent: a signal too big for the bus is left out
    /// (reported through ``onOversizedSignal``) rather than costing the connection.
    private func signal(_ path: String, _ interface: String, _ member: String, _ arguments: [DBusValue]) -> Message? {
        if let excess = messageSize(arguments, path: path, member: member).excess(over: maximumMessageSize) {
            onOversizedSignal?("\(interface).\(member) from \(path) \(excess): not sent")
            return nil
        }
        guard let message = try? Message.signal(path: path, interface: interface, member: member) else { return nil }
        do { try message.append(arguments) } catch { return nil }
        return message
    }

    /// The size a message with `arguments` would have, headers included, and its largest
    /// array argument.
    func messageSize(_ arguments: [DBusValue], path: String, member: String) -> MessageSize {
        var offset = 0
        var largest = 0
        for argument in arguments {
            let size = argument.wireSize(at: offset)
            if argument.signature.hasPrefix("a") { largest = max(largest, size) }
            offset += size
        }
        return MessageSize(bytes: offset + Self.headerAllowance + path.utf8.count + member.utf8.count, largestArray: largest)
    }

    // MARK: Tree structure

    /// The nearest object-manager path strictly above `path`.
    private func manager(above path: String) -> String? {
        managerPaths.filter { $0 != path && (path.hasPrefix($0 == "/" ? "/" : $0 + "/")) }.max { $0.count < $1.count }
    }

    private func isIntermediateNode(_ path: String) -> Bool {
        let prefix = path == "/" ? "/" : path + "/"
        return managerPaths.contains(path) || objects.keys.contains { $0.hasPrefix(prefix) }
    }

    /// Names of the direct children of `path`, for introspection.
    func childNames(of path: String) -> [String] {
        let prefix = path == "/" ? "/" : path + "/"
        var names = Set<String>()
        for key in objects.keys where key.hasPrefix(prefix) {
            let rest = key.dropFirst(prefix.count)
            if let first = rest.split(separator: "/").first { names.insert(String(first)) }
        }
        return names.sorted()
    }

    /// The interfaces exported at `path`, standard ones included (for introspection).
    func allInterfaces(at path: String) -> [InterfaceDescription] {
        standardInterfaces(for: path, exported: objects[path] != nil) + (objects[path]?.interfaces() ?? [])
    }

    /// The `a{sv}` a `GetAll` of `interface` returns: readable properties whose getter succeeds
    /// and that `call`'s sender may read; for a broadcast (`call` is `nil`), only unrestricted ones.
    /// How each readable property of `interface` is signalled. A computed table says only which
    /// are restricted: those are the ones a broadcast (`inBroadcast`, the names its property
    /// dictionary carries) leaves out, invalidated by name; the others are emitted with their
    /// values, which are not read again.
    func signalledProperties(_ interface: InterfaceDescription, inBroadcast: Set<String>) -> [String: ChangeSignal] {
        switch interface.properties {
        case .fixed(let list):
            return Dictionary(list.filter { $0.access != .write }.map { ($0.name, $0.changeSignal) }, uniquingKeysWith: { first, _ in first })
        case .dynamic(let names, let lookup):
            return Dictionary(names().compactMap(lookup).map { ($0.name, $0.changeSignal) }, uniquingKeysWith: { first, _ in first })
        case .computed(let table):
            return Dictionary(table.names().map { ($0, inBroadcast.contains($0) ? ChangeSignal.emits : .invalidates) },
                              uniquingKeysWith: { first, _ in first })
        }
    }

    /// The names of `interface`'s readable properties, without describing each one.
    func propertyNames(_ interface: InterfaceDescription) -> [String] {
        switch interface.properties {
        case .fixed(let list): list.filter { $0.access != .write }.map(\.name)
        case .dynamic(let names, _): names()
        case .computed(let table): table.names()
        }
    }

    func propertyDictionary(_ interface: InterfaceDescription, for call: MethodCall?) -> DBusValue {
        .dictionary(key: .string, value: .variant, interface.properties.all.compactMap { property in
            guard property.access != .write else { return nil }
            if let authorize = property.authorizeRead {
                guard let call, (try? authorize(call)) != nil else { return nil }
            }
            guard let value = try? property.get() else { return nil }
            return DictionaryEntry(.string(property.name), .variant(value))
        })
    }

    /// Writes what ``propertyDictionary(_:for:)`` returns, straight into a reply.
    func writePropertyDictionary(_ interface: InterfaceDescription, for call: MethodCall?, to writer: inout MessageBodyWriter) {
        writer.dictionary("{sv}") { dictionary in
            var all: Set<String>? = nil
            writeProperties(interface, for: call, to: &dictionary, seen: &all)
        }
    }

    /// Writes the `{sv}` entries of ``propertyDictionary(_:for:)``; names in `seen` are left
    /// out and the written ones added (GetAll of every interface lists a name once); `nil`
    /// writes them all.
    func writeProperties(_ interface: InterfaceDescription, for call: MethodCall?, to writer: inout MessageBodyWriter,
                         seen: inout Set<String>?) {
        if case .computed(let table) = interface.properties {
            table.forEach { name, value, restricted in
                if restricted {
                    guard let call, let property = table.lookup(name), let authorize = property.authorizeRead,
                          (try? authorize(call)) != nil else { return }
                }
                if seen != nil, !seen!.insert(name).inserted { return }
                writer.entry(name, value)
            }
            return
        }
        for property in interface.properties.all {
            guard property.access != .write else { continue }
            if let authorize = property.authorizeRead {
                guard let call, (try? authorize(call)) != nil else { continue }
            }
            guard let value = try? property.get() else { continue }
            if seen != nil, !seen!.insert(property.name).inserted { continue }
            writer.entry(property.name, value)
        }
    }

    /// Objects strictly below `path`, for `GetManagedObjects`.
    func managedObjects(below path: String) -> [(String, ExportedObject)] {
        let prefix = path == "/" ? "/" : path + "/"
        return objects.filter { $0.key.hasPrefix(prefix) }.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }

    func isObjectManager(_ path: String) -> Bool { managerPaths.contains(path) }
}

/// An exported object: its own interface descriptions (the tree adds the standard ones).
///
/// The list is built once, on first use; what changes at run time lives in dynamic
/// ``PropertyTable``s, which are consulted on every call.
public final class ExportedObject {
    private let make: () -> [InterfaceDescription]
    private var cached: [InterfaceDescription]?

    public init(interfaces: @escaping () -> [InterfaceDescription]) { make = interfaces }

    /// The value readers of the object's computed tables, by interface name, built with the
    /// list; `nil` when the object describes `org.freedesktop.DBus.Properties` itself (then its
    /// own description decides every `Get`). Kept apart so the fast `Get` copies one closure, not
    /// an interface's description (its method table and the table's six closures).
    private var valueReaders: [(name: String, read: (String) -> DBusValue?)]?

    /// The object's own interfaces.
    public func interfaces() -> [InterfaceDescription] {
        if let cached { return cached }
        let built = make()
        cached = built
        valueReaders = built.contains { $0.name == ObjectTree.propertiesInterface } ? nil : built.compactMap { interface in
            guard case .computed(let table) = interface.properties else { return nil }
            return (interface.name, table.value)
        }
        return built
    }

    /// The reader of the computed table of the interface whose name is the C string `name`.
    func valueReader(interface name: UnsafePointer<CChar>) -> ((String) -> DBusValue?)? {
        if cached == nil { _ = interfaces() }
        guard let valueReaders else { return nil }
        let length = strlen(name)
        for index in valueReaders.indices {
            // Bytes compared in place: no String made from the call's interface name.
            let matches = valueReaders[index].name.utf8.withContiguousStorageIfAvailable { bytes in
                bytes.count == length && memcmp(bytes.baseAddress!, name, length) == 0
            } ?? (valueReaders[index].name == String(cString: name))
            if matches { return valueReaders[index].read }
        }
        return nil
    }

    /// One of the object's own interfaces, by name.
    public func interface(named name: String) -> InterfaceDescription? {
        interfaces().first { $0.name == name }
    }
}
