import CDBus
import Glibc

/// An owned `DBusMessage`.
///
/// `@unchecked Sendable`: a `DBusMessage` has no lock, so a message must never be touched from
/// two threads at once. Messages are built, then handed off whole (to the connection's queue or
/// to the one awaiting caller); nothing keeps using a message after handing it off.
public final class Message: @unchecked Sendable {
    /// The wrapped pointer; owned (one reference), released in `deinit`.
    let raw: OpaquePointer

    /// Takes ownership of one reference to `raw`.
    init(owning raw: OpaquePointer) { self.raw = raw }

    /// Adds a reference to a borrowed `raw` (e.g. a filter's argument).
    init(retaining raw: OpaquePointer) {
        dbus_message_ref(raw)
        self.raw = raw
    }

    /// Unix fds decoded from this message by ``arguments()``: duplicates libdbus made for us,
    /// which nobody else owns. Closed by ``closeReceivedFDs()`` (the tree calls it after
    /// dispatching the call) or at the latest in `deinit`, unless taken with ``takeUnixFD(_:)``.
    /// Without this, every `h` a client sends, even in a refused call, stays open for good.
    private var receivedFDs: [Int32] = []

    deinit {
        closeReceivedFDs()
        dbus_message_unref(raw)
    }

    /// Takes ownership of `fd`, a unix fd decoded from this message: the caller must close it.
    /// Returns `false` when `fd` is not one of this message's (or was already taken or closed).
    public func takeUnixFD(_ fd: Int32) -> Bool {
        guard let index = receivedFDs.firstIndex(of: fd) else { return false }
        receivedFDs.remove(at: index)
        return true
    }

    /// Closes every unix fd decoded from this message and not taken.
    public func closeReceivedFDs() {
        for fd in receivedFDs { close(fd) }
        receivedFDs = []
    }

    /// The kind of a message (`dbus_message_get_type`).
    public enum Kind: Int32, Sendable {
        case invalid = 0, methodCall = 1, methodReturn = 2, error = 3, signal = 4
    }

    // MARK: Construction

    /// A method call (`dbus_message_new_method_call`). Names are validated first, because
    /// libdbus aborts on invalid ones.
    public static func methodCall(destination: String?, path: String, interface: String?, member: String) throws(DBusError) -> Message {
        try Validation.check(path: path)
        if let interface { try Validation.check(interface: interface) }
        try Validation.check(member: member)
        if let destination { try Validation.check(busName: destination) }
        guard let raw = dbus_message_new_method_call(destination, path, interface, member) else {
            throw DBusError(name: DBusError.Name.noMemory, message: "out of memory")
        }
        return Message(owning: raw)
    }

    /// A signal (`dbus_message_new_signal`).
    public static func signal(path: String, interface: String, member: String) throws(DBusError) -> Message {
        try Validation.check(path: path)
        try Validation.check(interface: interface)
        try Validation.check(member: member)
        guard let raw = dbus_message_new_signal(path, interface, member) else {
            throw DBusError(name: DBusError.Name.noMemory, message: "out of memory")
        }
        return Message(owning: raw)
    }

    /// A method return for this call (`dbus_message_new_method_return`).
    public func makeReturn() -> Message? {
        dbus_message_new_method_return(raw).map { Message(owning: $0) }
    }

    /// An error reply for this call (`dbus_message_new_error`).
    public func makeError(_ error: DBusError) -> Message? {
        let name = Validation.isValidErrorName(error.name) ? error.name : DBusError.Name.failed
        return dbus_message_new_error(raw, name, error.message).map { Message(owning: $0) }
    }

    // MARK: Header fields

    /// The message kind.
    public var kind: Kind { Kind(rawValue: dbus_message_get_type(raw)) ?? .invalid }
    /// The object path, if any (`dbus_message_get_path`).
    public var path: String? { dbus_message_get_path(raw).map { String(cString: $0) } }
    /// The interface, if any.
    public var interface: String? { dbus_message_get_interface(raw).map { String(cString: $0) } }
    /// The member (method or signal name), if any.
    public var member: String? { dbus_message_get_member(raw).map { String(cString: $0) } }
    /// The sender's unique name, if any.
    public var sender: String? { dbus_message_get_sender(raw).map { String(cString: $0) } }
    /// The destination, if any.
    public var destination: String? { dbus_message_get_destination(raw).map { String(cString: $0) } }
    /// The error name of an error message.
    public var errorName: String? { dbus_message_get_error_name(raw).map { String(cString: $0) } }
    /// The body's signature (`dbus_message_get_signature`).
    public var signature: String { dbus_message_get_signature(raw).map { String(cString: $0) } ?? "" }
    /// The serial number assigned when sent.
    public var serial: UInt32 { dbus_message_get_serial(raw) }
    /// The serial this message replies to.
    public var replySerial: UInt32 { dbus_message_get_reply_serial(raw) }
    /// Whether the sender asked for no reply.
    public var noReply: Bool {
        get { dbus_message_get_no_reply(raw) != 0 }
        set { dbus_message_set_no_reply(raw, newValue ? 1 : 0) }
    }

    /// Whether the message is a signal with this interface and member.
    public func isSignal(_ interface: String, _ member: String) -> Bool {
        dbus_message_is_signal(raw, interface, member) != 0
    }

    // MARK: Body

    /// Decodes every argument of the body.
    public func arguments() throws(DBusError) -> [DBusValue] {
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(raw, &iter) != 0 else { return [] }
        var fds: [Int32] = []
        defer { if !fds.isEmpty { receivedFDs += fds } }
        do {
            return try MessageIterator.readAll(&iter, fds: &fds)
        } catch {
            throw .invalidArgs("malformed message body: \(error.reason)")
        }
    }

    /// Appends arguments to the body. Each value is validated first.
    public func append(_ values: [DBusValue]) throws(DBusError) {
        for value in values {
            do { try value.validate() } catch {
                throw .invalidArgs("cannot marshal value of type '\(value.signature)': \(error.reason)")
            }
        }
        // libdbus loops forever appending past the 255-byte body signature limit: refuse first.
        let length = signature.utf8.count + values.reduce(0) { $0 + $1.signature.utf8.count }
        guard length <= Signature.maximumLength else {
            throw .invalidArgs("cannot marshal \(values.count) values: the body signature would be \(length) bytes, more than \(Signature.maximumLength)")
        }
        var iter = DBusMessageIter()
        dbus_message_iter_init_append(raw, &iter)
        for value in values {
            do {
                try MessageIterator.append(value, to: &iter)
            } catch {
                throw .invalidArgs("cannot marshal value of type '\(value.signature)': \(error.reason)")
            }
        }
    }

    /// Appends arguments to the body.
    public func append(_ values: DBusValue...) throws(DBusError) { try append(values) }

    /// The error carried by an error message, or `nil`.
    public var error: DBusError? {
        guard kind == .error else { return nil }
        let text = (try? arguments())?.first?.stringValue ?? ""
        return DBusError(name: errorName ?? DBusError.Name.failed, message: text)
    }
}
