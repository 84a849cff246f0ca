import Glibc

/// A message body marshalled by hand, in the machine's byte order (libdbus's for the messages
/// it makes), for ``MessageBodyWriter``'s buffered mode. A class: the writer and its nested
/// writes share one, and copying a struct of bytes would copy them.
///
/// libdbus's appends cost a call, a signature check and often an allocation per field: for a
/// body of hundreds of thousands of fields (a 2 MB listing) that was most of the reply's time.
/// Here a field is a few stores into one growing array, and libdbus checks the whole body once
/// when the message is made from it (``Message/replacingBody(with:signature:)``).
final class WireBuffer {
    /// The bytes, `count` of them, in `capacity` allocated; aligned to 8, as the body's start is.
    private var base: UnsafeMutableRawPointer
    private(set) var count = 0
    private var capacity: Int

    init(capacity: Int = 256) {
        self.capacity = capacity
        base = .allocate(byteCount: capacity, alignment: 8)
    }

    deinit { base.deallocate() }

    /// Room for `extra` more bytes.
    @inline(__always) private func reserve(_ extra: Int) {
        if count + extra > capacity { grow(to: count + extra) }
    }

    @inline(never) private func grow(to needed: Int) {
        var newCapacity = capacity * 2
        while newCapacity < needed { newCapacity *= 2 }
        let grown = UnsafeMutableRawPointer.allocate(byteCount: newCapacity, alignment: 8)
        grown.copyMemory(from: base, byteCount: count)
        base.deallocate()
        base = grown
        capacity = newCapacity
    }

    @inline(__always) static func align(_ offset: Int, _ alignment: Int) -> Int {
        (offset + alignment - 1) & ~(alignment - 1)
    }

    @inline(__always) func pad(to alignment: Int) {
        let padding = Self.align(count, alignment) - count
        guard padding > 0 else { return }
        reserve(padding)
        (base + count).initializeMemory(as: UInt8.self, repeating: 0, count: padding)
        count += padding
    }

    @inline(__always) func append(_ byte: UInt8) {
        reserve(1)
        base.storeBytes(of: byte, toByteOffset: count, as: UInt8.self)
        count += 1
    }

    /// A fixed-size value, aligned to its size.
    @inline(__always) func append<T: FixedWidthInteger>(aligned value: T) {
        pad(to: MemoryLayout<T>.size)
        reserve(MemoryLayout<T>.size)
        base.storeBytes(of: value, toByteOffset: count, as: T.self)
        count += MemoryLayout<T>.size
    }

    /// An array's length field, to be filled in by ``closeArray(_:)``; returns where the
    /// elements start (after the padding to `alignment`) and where the length goes.
    @inline(__always) func openArray(alignment: Int) -> (lengthAt: Int, start: Int) {
        append(aligned: UInt32(0))
        let lengthAt = count - 4
        pad(to: alignment)
        return (lengthAt, count)
    }

    /// Writes the length of the array `openArray` began: the bytes since its start.
    @inline(__always) func closeArray(_ array: (lengthAt: Int, start: Int)) {
        patch(UInt32(truncatingIfNeeded: count - array.start), at: array.lengthAt)
    }

    /// Overwrites the four bytes at `offset` with `value`.
    func patch(_ value: UInt32, at offset: Int) {
        base.storeBytes(of: value, toByteOffset: offset, as: UInt32.self)
    }

    /// Bytes marshalled elsewhere, as they are.
    func appendRaw(_ raw: UnsafeRawBufferPointer) {
        guard let source = raw.baseAddress, !raw.isEmpty else { return }
        reserve(raw.count)
        (base + count).copyMemory(from: source, byteCount: raw.count)
        count += raw.count
    }

    /// Another buffer's bytes, as they are.
    func appendRaw(_ other: WireBuffer) { other.withBytes { appendRaw($0) } }

    func withBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: base, count: count))
    }

    /// A string or object path (`s`, `o`: a 32-bit length) or a signature (`g`: an 8-bit one),
    /// NUL-terminated. Returns `false` for a NUL inside, which the peer would read as the end.
    @discardableResult
    func appendText(_ text: String, signature: Bool = false) -> Bool {
        // In place for native and small strings (no copy, no retain): only a bridged one is copied.
        text.utf8.withContiguousStorageIfAvailable { appendText(utf8: $0, signature: signature) }
            ?? Array(text.utf8).withUnsafeBufferPointer { appendText(utf8: $0, signature: signature) }
    }

    @inline(__always) private func appendText(utf8: UnsafeBufferPointer<UInt8>, signature: Bool) -> Bool {
        if signature { append(UInt8(truncatingIfNeeded: utf8.count)) } else { append(aligned: UInt32(truncatingIfNeeded: utf8.count)) }
        reserve(utf8.count + 1)
        var clean = true
        if utf8.count <= 32 {
            // Most are short (metadata names, one-letter signatures): one pass beats two calls.
            let target = (base + count).assumingMemoryBound(to: UInt8.self)
            for index in 0..<utf8.count {
                let byte = utf8[index]
                target[index] = byte
                if byte == 0 { clean = false }
            }
        } else if let source = utf8.baseAddress {
            (base + count).copyMemory(from: source, byteCount: utf8.count)
            clean = memchr(source, 0, utf8.count) == nil
        }
        count += utf8.count
        base.storeBytes(of: 0, toByteOffset: count, as: UInt8.self)
        count += 1
        return clean
    }

    /// A whole value; it must have passed ``DBusValue/validate()``. Throws for what a buffer
    /// cannot carry: a unix fd (it travels beside the body), a string with a NUL.
    func append(_ value: DBusValue) throws(ValueError) {
        switch value {
        case .byte(let v): append(v)
        case .boolean(let v): append(aligned: UInt32(v ? 1 : 0))
        case .int16(let v): append(aligned: v)
        case .uint16(let v): append(aligned: v)
        case .int32(let v): append(aligned: v)
        case .uint32(let v): append(aligned: v)
        case .int64(let v): append(aligned: v)
        case .uint64(let v): append(aligned: v)
        case .double(let v): append(aligned: v.bitPattern)
        case .string(let s), .objectPath(let s):
            guard appendText(s) else { throw ValueError("a string holds a NUL") }
        case .signature(let g):
            guard appendText(g, signature: true) else { throw ValueError("a signature holds a NUL") }
        case .unixFD:
            throw ValueError("a unix fd cannot be marshalled into a buffered body")
        case .variant(let inner):
            appendText(inner.signature, signature: true)
            try append(inner)
        case .bytes(let items):
            append(aligned: UInt32(truncatingIfNeeded: items.count))
            items.withUnsafeBytes { appendRaw($0) }
        case .array(let element, let items):
            let array = openArray(alignment: DBusValue.alignment(of: element))
            for item in items { try append(item) }
            closeArray(array)
        case .dictionary(_, _, let entries):
            let array = openArray(alignment: 8)
            for entry in entries {
                pad(to: 8)
                try append(entry.key)
                try append(entry.value)
            }
            closeArray(array)
        case .structure(let fields):
            pad(to: 8)
            for field in fields { try append(field) }
        }
    }
}
