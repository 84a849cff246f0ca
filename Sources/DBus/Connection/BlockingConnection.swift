import CDBus

/// A connection for one-shot command-line calls: connect, `Hello`, and calls that wait for
/// their reply on the calling thread (`dbus_connection_send_with_reply_and_block`).
///
/// No queue, no poll thread, no dispatch: what `dbus-send` does. Starting the machinery of a
/// ``Connection`` (a serial queue, libdispatch's worker threads, the poll thread, continuations)
/// cost `propctl get` about as much as the rest of the process. Use it only where blocking the
/// thread is what is wanted, never on a connection's queue or inside a Task's cooperative pool
/// when other work is waiting.
///
/// Not `Sendable`: one thread uses it, then drops it.
public final class BlockingConnection {
    private let raw: OpaquePointer

    /// Opens a private connection to `bus` and registers with it (`Hello`, blocking).
    public init(to bus: BusAddress) throws(DBusError) {
        _ = Connection.threadsInitialized
        let address = try bus.resolved()
        var error = CError()
        guard let raw = dbus_connection_open_private(address, &error.raw) else {
            throw error.take(default: "cannot connect to \(address)")
        }
        self.raw = raw
        // Otherwise libdbus calls _exit(1) when the bus goes away.
        dbus_connection_set_exit_on_disconnect(raw, 0)
        guard dbus_bus_register(raw, &error.raw) != 0 else {
            throw error.take(default: "cannot register with the bus at \(address)")
        }
    }

    deinit {
        dbus_connection_close(raw)
        dbus_connection_unref(raw)
    }

    /// Sends `message` and waits for the reply; an error reply is thrown.
    public func call(_ message: Message, timeoutMilliseconds: Int32 = -1) throws(DBusError) -> Message {
        var error = CError()
        guard let reply = dbus_connection_send_with_reply_and_block(raw, message.raw, timeoutMilliseconds, &error.raw) else {
            throw error.take(default: "no reply")
        }
        return Message(owning: reply)
    }

    /// Calls a method and returns its decoded reply arguments.
    public func call(destination: String, path: String, interface: String, member: String,
                     arguments: [DBusValue] = [], timeoutMilliseconds: Int32 = -1) throws(DBusError) -> [DBusValue] {
        let message = try Message.methodCall(destination: destination, path: path, interface: interface, member: member)
        try message.append(arguments)
        return try call(message, timeoutMilliseconds: timeoutMilliseconds).arguments()
    }
}
