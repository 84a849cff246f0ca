import CDBus
import Dispatch
import Glibc

/// The end of a round: the before-flush hooks, then signals and replies, sized and sent.
extension ObjectTree {
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
    func reply(to message: Message, streaming body: ReplyBody, isWrite: Bool = false, credentials: Credentials? = nil) {
        reply(to: message, bufferedSignature: body.bufferedSignature, isWrite: isWrite, credentials: credentials, writing: body.write)
    }

    /// ``reply(to:streaming:isWrite:credentials:)`` with the body's writer passed down, not
    /// stored: the fast `Get` answers without a ``ReplyBody`` (and its closure) per call.
    func reply(to message: Message, bufferedSignature: String?, isWrite: Bool = false, credentials: Credentials? = nil,
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
        if writer.failure == nil, !isWrite, let refusal = admission(of: message, size: Self.sentBytes(size), credentials: credentials) {
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
            connection.backlog.sent(Self.sentBytes(size))
        }
        pendingReplies.append(PendingReply(message: reply, writeCall: isWrite ? message : nil))
    }

    /// What a message of `size` (its body, and the allowance for a header that no reply or
    /// signal of a tree comes near) is charged and counted as sent: its body and a typical
    /// header. The allowance bounds a message against a limit; charged, it made every small
    /// reply cost 2 KiB.
    static func sentBytes(_ size: MessageSize) -> Int { size.bytes - headerAllowance + chargedHeader }

    /// A reply's or a signal's header as charged: path, interface, member, names, signature.
    static let chargedHeader = 128

    /// Why a reply of `size` bytes to `message` may not be sent, if it may not: the caller's
    /// quota (``replyAdmission``), or the bus holding too much of the service's messages
    /// already (``BusBacklog``).
    func admission(of message: Message, size: Int, credentials: Credentials?) -> DBusError? {
        if let refusal = replyAdmission?(message, credentials, size) { return refusal }
        guard !connection.backlog.admits(size) else { return nil }
        return DBusError(name: DBusError.Name.limitsExceeded, message: "the reply to \(message.member ?? "the call") (\(size) bytes) is not sent now: the bus holds \(connection.backlog.estimate) bytes of this service's messages that their readers have not read yet, and its bound is \(connection.backlog.limit ?? 0); ask again later, or for less at once")
    }

    /// Queues a reply produced outside the call's own round (deferred handlers), charged to
    /// the caller as the call's own reply would be.
    func enqueueReply(to message: Message, _ result: Result<[DBusValue], DBusError>, credentials: Credentials? = nil) {
        dispatchPrecondition(condition: .onQueue(connection.queue))
        reply(to: message, result, credentials: credentials)
        connection.scheduleRound()
    }

    func flush() {
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
            signalCharges.reset()
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
            let causes = signalCharges.take(key)
            guard let (message, arguments) = propertiesChanged(key, pendingChanges[key] ?? [:]) else { continue }
            signalCharges.charge(causes, counting: connection.backlog) { Self.sentBytes(messageSize(arguments, path: key.path, member: "PropertiesChanged")) }
            connection.send(message)
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

    /// The `PropertiesChanged` of `key`'s noted `changes`, with its arguments: the values that
    /// changed, each up to ``SignalCharges/maximumValueSize`` (a larger one, or one only some may
    /// read, by name in `invalidated_properties`); `nil` when nothing changed.
    func propertiesChanged(_ key: ChangeKey, _ changes: [String: DBusValue?]) -> (Message, [DBusValue])? {
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
                if restricted || current.wireSize() > signalCharges.maximumValueSize {
                    invalidated.append(.string(name))
                } else {
                    changed.append(DictionaryEntry(.string(name), .variant(current)))
                }
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
            case .emits where property.authorizeRead != nil || current.wireSize() > signalCharges.maximumValueSize:
                invalidated.append(.string(name))
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
        return signal(key.path, "org.freedesktop.DBus.Properties", "PropertiesChanged", arguments).map { ($0, arguments) }
    }

    /// Builds a signal, or `nil` when it cannot be sent: a signal too big for the bus is left out
    /// (reported through ``onOversizedSignal``) rather than costing the connection.
    func signal(_ path: String, _ interface: String, _ member: String, _ arguments: [DBusValue]) -> Message? {
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
}
