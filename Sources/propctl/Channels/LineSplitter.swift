import Glibc

/// Splits a byte stream into lines, looking at every byte once, and holds at most
/// ``maximumLength`` bytes of a line: a longer one is dropped as it goes by, and reported.
///
/// Rescanning the whole pending buffer for a newline after every read made a long line cost
/// O(n²): the line after a 16 MiB line arrived seconds late, and the buffer had no bound.
struct LineSplitter {
    /// What the stream said.
    enum Event: Hashable {
        /// A complete line, without its `\n`.
        case line([UInt8])
        /// A line of `length` bytes (without its `\n`), longer than the bound: dropped.
        case tooLong(length: Int)
    }

    /// The longest line kept, in bytes, without its `\n`.
    let maximumLength: Int
    /// Every byte searched for a newline so far: the stream's length, never more (tests read it
    /// to check that the work is linear).
    private(set) var scannedBytes = 0
    /// The start of the current line, if it is being kept.
    private var pending: [UInt8] = []
    /// The length of the current line so far, if it passed the bound and is being dropped.
    private var dropping: Int?

    init(maximumLength: Int) {
        self.maximumLength = maximumLength
    }

    /// Takes the next bytes of the stream; returns the lines they complete, in order.
    mutating func append(_ bytes: UnsafeRawBufferPointer) -> [Event] {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return [] }
        var events: [Event] = []
        var start = 0
        while start < bytes.count {
            let rest = bytes.count - start
            guard let found = memchr(base + start, Int32(UInt8(ascii: "\n")), rest) else {
                scannedBytes += rest
                keep(UnsafeRawBufferPointer(rebasing: bytes[start...]))
                break
            }
            let end = base.distance(to: UnsafeRawPointer(found))
            scannedBytes += end - start + 1
            keep(UnsafeRawBufferPointer(rebasing: bytes[start..<end]))
            events.append(endLine())
            start = end + 1
        }
        return events
    }

    /// The stream ended: its last line, if it had one without a `\n`.
    mutating func finish() -> [Event] {
        guard dropping != nil || !pending.isEmpty else { return [] }
        return [endLine()]
    }

    /// Adds bytes to the current line, or drops them once the line is too long.
    private mutating func keep(_ bytes: UnsafeRawBufferPointer) {
        if let length = dropping {
            dropping = length + bytes.count
        } else if pending.count + bytes.count > maximumLength {
            dropping = pending.count + bytes.count
            pending = []
        } else {
            pending.append(contentsOf: bytes)
        }
    }

    private mutating func endLine() -> Event {
        defer {
            dropping = nil
            pending.removeAll(keepingCapacity: pending.capacity <= 64 << 10)
        }
        if let length = dropping { return .tooLong(length: length) }
        return .line(pending)
    }
}
