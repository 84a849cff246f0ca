import CDBus
import Glibc

/// Writes a message body piece by piece straight into libdbus.
///
/// Big replies (`ListProperties`, `GetManagedObjects`, `GetAll`) are written from the model
/// without building a ``DBusValue`` tree first. The writer counts the body's length as it goes
/// (by the wire's alignment rules) and stops appending once the body would pass its limit:
/// from then on it only counts, so the caller learns the whole size and answers with an error
/// instead, having built no more than the limit and sent nothing.
///
/// Values given whole (``value(_:)``, ``variant(_:)``) are not validated again: they must have
/// passed ``DBusValue/validate()`` on their way in (a model's stored values, defaults and
/// metadata have). libdbus still checks strings' UTF-8 and every signature; what it refuses, and
/// running out of memory, ends in ``failure`` and the caller answers with an error instead.
///
/// A buffered writer (``buffered(limit:arrayLimit:)``, a ``ReplyBody`` made with a signature)
/// marshals into a ``WireBuffer`` instead, and libdbus checks the whole body once when the
/// message is made from it: the same bytes, without a libdbus call per field.
public struct MessageBodyWriter {
    /// The body's length so far: the bytes appended, or that would have been.
    public private(set) var size: Int
    /// The longest array written through this writer.
    public private(set) var largestArray = 0
    /// Whether the body passed `limit` (or an array the protocol's array limit): appending
    /// stopped there and the rest was only counted; the message must not be sent.
    public private(set) var overflowed = false
    /// Why appending failed, if it did; the rest is then only counted.
    public private(set) var failure: String?
    /// The largest body allowed, and the largest array.
    private let limit: Int
    private let arrayLimit: Int
    private var counting: Bool
    private var iter: DBusMessageIter
    /// Set for a buffered writer, which writes here and never touches `iter`.
    private(set) var buffer: WireBuffer?

    /// A writer that appends nothing: it only counts.
    public static func counting() -> MessageBodyWriter {
        MessageBodyWriter(size: 0, limit: .max, arrayLimit: .max, counting: true, iter: DBusMessageIter())
    }

    /// A writer appending to the end of `message`'s body, which must be empty, up to `limit`
    /// bytes of body and `arrayLimit` bytes per array.
    static func appending(to message: Message, limit: Int, arrayLimit: Int) -> MessageBodyWriter {
        var iter = DBusMessageIter()
        dbus_message_iter_init_append(message.raw, &iter)
        return MessageBodyWriter(size: 0, limit: limit, arrayLimit: arrayLimit, counting: false, iter: iter)
    }

    /// A writer marshalling into its own ``buffer`` up to `limit` bytes of body and `arrayLimit`
    /// bytes per array; ``Message/replacingBody(with:signature:)`` makes the message.
    static func buffered(limit: Int, arrayLimit: Int) -> MessageBodyWriter {
        var writer = MessageBodyWriter(size: 0, limit: limit, arrayLimit: arrayLimit, counting: false, iter: DBusMessageIter())
        writer.buffer = WireBuffer()
        return writer
    }

    private init(size: Int, limit: Int, arrayLimit: Int, counting: Bool, iter: DBusMessageIter) {
        self.size = size
        self.limit = limit
        self.arrayLimit = arrayLimit
        self.counting = counting
        self.iter = iter
    }

    @inline(__always) private static func align(_ offset: Int, _ alignment: Int) -> Int {
        (offset + alignment - 1) & ~(alignment - 1)
    }

    /// Whether to append what was just counted: not past the limit, nor after a failure.
    @inline(__always) private mutating func appends() -> Bool {
        if counting { return false }
        if size > limit {
            overflowed = true
            counting = true
            return false
        }
        return true
    }

    private mutating func fail(_ reason: String) {
        if failure == nil { failure = reason }
        counting = true
    }

    // MARK: Basic values

    /// A string (`s`).
    public mutating func string(_ text: String) { self.text(text, .string) }

    /// An object path (`o`); the caller has validated it (exported paths are).
    public mutating func objectPath(_ path: String) { text(path, .objectPath) }

    private mutating func text(_ text: String, _ code: TypeCode) {
        let length = text.utf8.count
        size = Self.align(size, 4) + 4 + length + 1
        guard appends() else { return }
        if buffer != nil {
            if !buffer!.appendText(text) { fail("cannot append the string '\(text.prefix(40))'") }
            return
        }
        let ok = text.withCString { cString -> Bool in
            // A NUL inside would silently cut the string short in libdbus.
            guard strlen(cString) == length else { return false }
            var pointer: UnsafePointer<CChar>? = cString
            return dbus_message_iter_append_basic(&iter, code.cValue, &pointer) != 0
        }
        if !ok { fail("cannot append the string '\(text.prefix(40))'") }
    }

    /// A boolean (`b`).
    public mutating func boolean(_ value: Bool) {
        size = Self.align(size, 4) + 4
        guard appends() else { return }
        if buffer != nil { buffer!.append(aligned: UInt32(value ? 1 : 0)); return }
        var raw: dbus_bool_t = value ? 1 : 0
        if dbus_message_iter_append_basic(&iter, TypeCode.boolean.cValue, &raw) == 0 { fail("out of memory") }
    }

    /// A `t`.
    public mutating func uint64(_ value: UInt64) {
        size = Self.align(size, 8) + 8
        guard appends() else { return }
        if buffer != nil { buffer!.append(aligned: value); return }
        var raw = value
        if dbus_message_iter_append_basic(&iter, TypeCode.uint64.cValue, &raw) == 0 { fail("out of memory") }
    }

    /// Any value, whole; it must have passed ``DBusValue/validate()``.
    public mutating func value(_ value: DBusValue) {
        size += value.wireSize(at: size)
        guard appends() else { return }
        do throws(ValueError) {
            if buffer != nil { try buffer!.append(value) } else { try MessageIterator.append(value, to: &iter) }
        } catch { fail(error.reason) }
    }

    /// A variant (`v`) holding `value`, which must have passed ``DBusValue/validate()``.
    public mutating func variant(_ value: DBusValue) {
        variant(signature: value.signature) { $0.value(value) }
    }

    /// A variant whose payload, of type `signature`, `body` writes.
    public mutating func variant(signature: String, _ body: (inout MessageBodyWriter) -> Void) {
        size += 1 + signature.utf8.count + 1
        if buffer != nil {
            if appends() { buffer!.appendText(signature, signature: true) }
            body(&self)
            return
        }
        container(.variant, signature, body)
    }

    // MARK: Containers

    /// An array of elements of type `elementSignature` (aligned to `alignment`), which `body`
    /// writes one after the other.
    public mutating func array(of elementSignature: String, alignment: Int, _ body: (inout MessageBodyWriter) -> Void) {
        size = Self.align(size, 4) + 4
        let start = Self.align(size, alignment)
        size = start
        if buffer != nil {
            // Inline: a buffer needs no sub-iterator, only the length filled in afterwards.
            let array = appends() ? buffer!.openArray(alignment: alignment) : nil
            body(&self)
            if let array, !counting { buffer!.closeArray(array) }
        } else {
            container(.array, elementSignature, body)
        }
        largestArray = max(largestArray, size - start)
        if largestArray > arrayLimit { overflowed = true; counting = true }
    }

    /// A dictionary `a{…}` whose entries `body` writes with ``entry(_:)``.
    public mutating func dictionary(_ entrySignature: String, _ body: (inout MessageBodyWriter) -> Void) {
        array(of: entrySignature, alignment: 8, body)
    }

    /// One dictionary entry: `body` writes its key, then its value.
    public mutating func entry(_ body: (inout MessageBodyWriter) -> Void) {
        size = Self.align(size, 8)
        if buffer != nil {
            if appends() { buffer!.pad(to: 8) }
            body(&self)
            return
        }
        container(.dictEntryValue, nil, body)
    }

    /// One `a{sv}` entry.
    public mutating func entry(_ key: String, _ value: DBusValue) {
        entry { $0.string(key); $0.variant(value) }
    }

    /// One `a{sv}` entry holding a string, with no ``DBusValue`` made for it.
    public mutating func entry(_ key: String, string value: String) {
        entry { $0.string(key); $0.variant(signature: "s") { $0.string(value) } }
    }

    /// One `a{sv}` entry holding a boolean.
    public mutating func entry(_ key: String, boolean value: Bool) {
        entry { $0.string(key); $0.variant(signature: "b") { $0.boolean(value) } }
    }

    /// One `a{sv}` entry holding a `t`.
    public mutating func entry(_ key: String, uint64 value: UInt64) {
        entry { $0.string(key); $0.variant(signature: "t") { $0.uint64(value) } }
    }

    /// A struct, whose fields `body` writes in order.
    public mutating func structure(_ body: (inout MessageBodyWriter) -> Void) {
        size = Self.align(size, 8)
        if buffer != nil {
            if appends() { buffer!.pad(to: 8) }
            body(&self)
            return
        }
        container(.structValue, nil, body)
    }

    private mutating func container(_ code: TypeCode, _ signature: String?, _ body: (inout MessageBodyWriter) -> Void) {
        var sub = MessageBodyWriter(size: size, limit: limit, arrayLimit: arrayLimit, counting: true, iter: DBusMessageIter())
        var opened = false
        if appends() {
            if let signature {
                opened = signature.withCString { dbus_message_iter_open_container(&iter, code.cValue, $0, &sub.iter) } != 0
            } else {
                opened = dbus_message_iter_open_container(&iter, code.cValue, nil, &sub.iter) != 0
            }
            if opened { sub.counting = false } else { fail("out of memory opening a container") }
        }
        body(&sub)
        size = sub.size
        largestArray = max(largestArray, sub.largestArray)
        if sub.overflowed { overflowed = true; counting = true }
        if let failure = sub.failure { fail(failure) }
        guard opened else { return }
        // What stopped inside (the limit, a failure) leaves the message unsendable: let go of
        // the container, the caller drops the message.
        if sub.overflowed || sub.failure != nil {
            dbus_message_iter_abandon_container(&iter, &sub.iter)
        } else if dbus_message_iter_close_container(&iter, &sub.iter) == 0 {
            fail("out of memory closing a container")
        }
    }
}

/// A reply body written straight into the message (see ``MessageBodyWriter``); the
/// ``MethodResult/stream(_:)`` of a handler.
public struct ReplyBody {
    /// Writes the reply's arguments.
    let write: (inout MessageBodyWriter) -> Void
    /// The arguments' signature, for a body marshalled into a buffer first.
    let bufferedSignature: String?

    /// A body appended field by field through libdbus: for small bodies (a `Get`), where making
    /// a message from a buffer would cost more than the appends.
    public init(_ write: @escaping (inout MessageBodyWriter) -> Void) {
        self.write = write
        bufferedSignature = nil
    }

    /// A body marshalled into a buffer, which libdbus checks once against `signature` (the
    /// arguments' types, concatenated) when the reply is made: for big bodies (listings of
    /// thousands of fields). It must hold no unix fd: those travel beside a body.
    public init(signature: String, _ write: @escaping (inout MessageBodyWriter) -> Void) {
        self.write = write
        bufferedSignature = signature
    }
}
