import CDBus
import Glibc

extension Message {
    /// This message (a method return or signal not yet sent, with an empty body) with `body`, a
    /// body marshalled by ``WireBuffer`` of type `signature`, as its body: its header as libdbus
    /// made it (`dbus_message_marshal`) with a `SIGNATURE` field added, the body after it, made
    /// into a new message by `dbus_message_demarshal`, which checks header and body as a
    /// received message is checked. The new message gets its serial when sent, like any other.
    func replacingBody(with body: WireBuffer, signature: String) throws(DBusError) -> Message {
        var data: UnsafeMutablePointer<CChar>? = nil
        var length: Int32 = 0
        guard dbus_message_marshal(raw, &data, &length) != 0, let data else { throw DBusError(name: DBusError.Name.noMemory, message: "out of memory") }
        defer { dbus_free(data) }
        let template = UnsafeRawBufferPointer(start: data, count: Int(length))
        func uint32(at offset: Int) -> Int { Int(template.loadUnaligned(fromByteOffset: offset, as: UInt32.self)) }
        // The body is in the machine's byte order, as libdbus writes the headers it makes.
        let nativeOrder: UInt8 = 1.littleEndian == 1 ? UInt8(ascii: "l") : UInt8(ascii: "B")
        guard template.count >= 16, template[0] == nativeOrder, uint32(at: 4) == 0, dbus_message_get_signature(raw).map({ $0.pointee == 0 }) ?? true,
              signature.utf8.count <= 255 else {
            throw .failed("cannot give a body to a message that has one, or of another byte order")
        }
        let fieldsEnd = 16 + uint32(at: 12)
        let message = WireBuffer(capacity: fieldsEnd + 16 + signature.utf8.count + body.count)
        message.appendRaw(UnsafeRawBufferPointer(rebasing: template[0..<fieldsEnd]))
        // The SIGNATURE field (8): a struct `(yv)` holding the signature as a `g`.
        message.pad(to: 8)
        message.append(8)
        message.appendText("g", signature: true)
        message.appendText(signature, signature: true)
        message.patch(UInt32(message.count - 16), at: 12)
        message.pad(to: 8)
        message.patch(UInt32(truncatingIfNeeded: body.count), at: 4)
        // A serial of 0 is refused on the way in; the real one is given when it is sent.
        message.patch(UInt32(1), at: 8)
        message.appendRaw(body)
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        let made = message.withBytes { bytes in
            dbus_message_demarshal(bytes.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(truncatingIfNeeded: bytes.count), &error)
        }
        guard let made else {
            let reason = dbus_error_is_set(&error) != 0 ? String(cString: error.message) : "libdbus refused it"
            dbus_error_free(&error)
            throw .failed("cannot make the message from its marshalled body: \(reason)")
        }
        dbus_message_set_serial(made, 0)
        return Message(owning: made)
    }

    /// The marshalled body: the bytes after the header (which is padded to 8). For tests that
    /// compare bodies byte for byte; gives an unsent message the serial 1 (marshalling needs one).
    func marshalledBody() -> [UInt8] {
        if serial == 0 { dbus_message_set_serial(raw, 1) }
        var data: UnsafeMutablePointer<CChar>? = nil
        var length: Int32 = 0
        guard dbus_message_marshal(raw, &data, &length) != 0, let data else { return [] }
        defer { dbus_free(data) }
        let bytes = UnsafeRawBufferPointer(start: data, count: Int(length))
        return Array(bytes.suffix(Int(bytes.loadUnaligned(fromByteOffset: 4, as: UInt32.self))))
    }
}
