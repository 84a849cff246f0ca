import CDBus
import Dispatch
import Glibc

/// Routing a call: the object, interface and member, the access check, the reply.
extension ObjectTree {
    // MARK: Routing

    func handle(_ message: Message) {
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

    func route(_ message: Message, credentials identity: Credentials?) {
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
            if let refusal = callAdmission?(call, isWrite) { throw refusal }
            if isWrite { roundHasWrites = true }
            let cause = message.sender.map { SignalCause(sender: $0, userID: credentials?.userID) }
            switch try signalCharges.handling(cause, { () throws(DBusError) in try method.handler(call) }) {
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
    func answeredGet(_ message: Message, object: ExportedObject, credentials: Credentials?) -> Bool {
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
    func lookUpMethod(_ member: String, interface name: String, at path: String, object: ExportedObject?) -> MethodDescription?? {
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

    func reply(to message: Message, _ result: Result<[DBusValue], DBusError>, isWrite: Bool = false,
                       credentials: Credentials? = nil) {
        guard !message.noReply else { return }
        var reply: Message?
        var result = result
        if case .success(let values) = result {
            let size = messageSize(values, path: "", member: "")
            if size.excess(over: maximumMessageSize) != nil {
                result = .failure(replyTooLarge(message, size, maximumMessageSize))
            } else if !isWrite, let refusal = admission(of: message, size: Self.sentBytes(size), credentials: credentials) {
                result = .failure(refusal)
            } else {
                pendingReplyBytes += size.bytes
                connection.backlog.sent(Self.sentBytes(size))
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
}
