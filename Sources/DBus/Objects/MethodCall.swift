/// One incoming method call, as handed to a ``MethodDescription`` handler.
public struct MethodCall {
    /// The received message.
    public let message: Message
    /// The decoded arguments, already checked against the method's signature.
    public let arguments: [DBusValue]
    /// The input arguments' names and types, in order, from the method's description (shared
    /// with it, not copied per call).
    let argumentDescriptions: [(name: String, type: DBusType)]
    /// The caller's credentials, when the tree looks them up (``ObjectTree/requiresCredentials``);
    /// `nil` otherwise, or for a message without a sender (a peer-to-peer connection).
    public let credentials: Credentials?
    /// The caller's credentials whenever the tree looked them up, also when only to say who
    /// called (``ObjectTree/attributesCalls``) and not to decide by them: ``credentials`` is
    /// `nil` then, so nothing that decides or charges by it changes.
    public let identity: Credentials?
    let tree: ObjectTree

    /// The caller's unique name.
    public var sender: String { message.sender ?? "" }
    /// The object path the call was addressed to (read once from the message by the tree).
    public let path: String

    /// Takes ownership of a unix fd among ``arguments``: the handler must close it. Every fd
    /// not taken is closed as soon as the handler returns, even for a deferred call.
    public func takeUnixFD(_ fd: Int32) -> Bool { message.takeUnixFD(fd) }

    // MARK: Named, typed arguments

    /// The argument called `name` in the method's description.
    ///
    /// The tree has checked the call's signature against the description before the handler
    /// runs, so the typed accessors below cannot meet a value of another type; a name the
    /// description does not have is a bug in the handler, answered with `Failed`.
    public func argument(_ name: String) throws(DBusError) -> DBusValue {
        guard let index = argumentDescriptions.firstIndex(where: { $0.name == name }), index < arguments.count else {
            throw .failed("\(message.member ?? "the method") has no argument named '\(name)'")
        }
        return arguments[index]
    }

    /// A string, object path or signature argument.
    public func string(_ name: String) throws(DBusError) -> String {
        guard let text = try argument(name).stringValue else { throw mismatch(name, "a string") }
        return text
    }

    /// A `u` argument.
    public func uint32(_ name: String) throws(DBusError) -> UInt32 {
        guard case .uint32(let value) = try argument(name) else { throw mismatch(name, "a uint32") }
        return value
    }

    /// A `t` argument.
    public func uint64(_ name: String) throws(DBusError) -> UInt64 {
        guard case .uint64(let value) = try argument(name) else { throw mismatch(name, "a uint64") }
        return value
    }

    /// The value inside a `v` argument.
    public func variant(_ name: String) throws(DBusError) -> DBusValue {
        guard case .variant(let inner) = try argument(name) else { throw mismatch(name, "a variant") }
        return inner
    }

    /// An `as` argument.
    public func strings(_ name: String) throws(DBusError) -> [String] {
        guard case .array(_, let items) = try argument(name) else { throw mismatch(name, "an array of strings") }
        return items.compactMap(\.stringValue)
    }

    /// An `a{sv}` argument, by key (the values are the variants as sent).
    public func dictionary(_ name: String) throws(DBusError) -> [String: DBusValue] {
        guard let entries = try argument(name).stringKeyedEntries else { throw mismatch(name, "a dictionary") }
        return entries
    }

    private func mismatch(_ name: String, _ expected: String) -> DBusError {
        .invalidArgs("argument '\(name)' of \(message.member ?? "the method") must be \(expected)")
    }

    // MARK: Replies

    /// Replies to a call whose handler returned ``MethodResult/deferred``.
    /// The reply is charged to the caller as the call's own would be (``ObjectTree/replyAdmission``).
    public func reply(_ values: [DBusValue]) { tree.enqueueReply(to: message, .success(values), credentials: credentials) }

    /// Fails a call whose handler returned ``MethodResult/deferred``.
    public func fail(_ error: DBusError) { tree.enqueueReply(to: message, .failure(error)) }
}
