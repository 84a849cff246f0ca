/// One incoming method call, as handed to a ``MethodDescription`` handler.
public struct MethodCall {
    /// The received message.
    public let message: Message
    /// The decoded arguments, already checked against the method's signature.
    public let arguments: [DBusValue]
    /// The caller's credentials, when the tree looks them up (``ObjectTree/requiresCredentials``);
    /// `nil` otherwise, or for a message without a sender (a peer-to-peer connection).
    public let credentials: Credentials?
    let tree: ObjectTree

    /// The caller's unique name.
    public var sender: String { message.sender ?? "" }
    /// The object path the call was addressed to.
    public var path: String { message.path ?? "/" }

    /// Takes ownership of a unix fd among ``arguments``: the handler must close it. Every fd
    /// not taken is closed as soon as the handler returns, even for a deferred call.
    public func takeUnixFD(_ fd: Int32) -> Bool { message.takeUnixFD(fd) }

    /// Replies to a call whose handler returned ``MethodResult/deferred``.
    public func reply(_ values: [DBusValue]) { tree.enqueueReply(to: message, .success(values)) }

    /// Fails a call whose handler returned ``MethodResult/deferred``.
    public func fail(_ error: DBusError) { tree.enqueueReply(to: message, .failure(error)) }
}
