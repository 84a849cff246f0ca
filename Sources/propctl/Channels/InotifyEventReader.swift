import Glibc

/// The events queued on an inotify descriptor, read with `read(2)` into one buffer kept across
/// reads and decoded from the kernel's `struct inotify_event` records.
struct InotifyEventReader {
    /// One `struct inotify_event`.
    struct Event {
        /// The watch descriptor `inotify_add_watch` returned.
        var watch: Int32
        /// The `IN_*` bits.
        var mask: UInt32
        /// The name inside a watched directory; empty for an event on the watched inode itself.
        var name: String
    }

    /// Big enough for a burst of events: a read returns only whole records.
    private var buffer = [UInt8](repeating: 0, count: 64 * 1024)

    /// Reads every event queued on the non-blocking `descriptor` until none is left, handing
    /// each to `handle` in the kernel's order.
    mutating func readAll(from descriptor: Int32, _ handle: (Event) -> Void) {
        while true {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count <= 0 { return }
            var offset = 0
            while offset + MemoryLayout<inotify_event>.size <= count {
                let (watch, mask, length) = buffer.withUnsafeBytes { raw -> (Int32, UInt32, Int) in
                    let event = raw.loadUnaligned(fromByteOffset: offset, as: inotify_event.self)
                    return (event.wd, event.mask, Int(event.len))
                }
                let nameStart = offset + MemoryLayout<inotify_event>.size
                // The name is padded with NULs to an aligned length.
                let name = length == 0 ? "" : String(decoding: buffer[nameStart..<(nameStart + length)].prefix { $0 != 0 }, as: UTF8.self)
                offset = nameStart + length
                handle(Event(watch: watch, mask: mask, name: name))
            }
        }
    }
}
