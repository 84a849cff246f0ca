import Glibc

/// An open file descriptor: a thin, copyable wrapper over the `Int32` that `open(2)` returns,
/// in the manner of swift-system. It does not close itself; whoever opened it calls ``close()``.
public struct FileDescriptor: RawRepresentable, Hashable, Sendable {
    /// The descriptor number.
    public let rawValue: Int32

    /// Wraps a descriptor number.
    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// File descriptor 0.
    public static let standardInput = FileDescriptor(rawValue: STDIN_FILENO)
    /// File descriptor 1.
    public static let standardOutput = FileDescriptor(rawValue: STDOUT_FILENO)
    /// File descriptor 2.
    public static let standardError = FileDescriptor(rawValue: STDERR_FILENO)

    /// Opens `path` (`open(2)`); close-on-exec is always added, so no spawned program inherits it.
    public static func open(_ path: String, _ flags: Int32, mode: mode_t = 0o666) throws(Errno) -> FileDescriptor {
        switch Errno.retryingInterrupted({ Glibc.open(path, flags | O_CLOEXEC, mode) }) {
        case .success(let descriptor): return FileDescriptor(rawValue: descriptor)
        case .failure(let error): throw error
        }
    }

    /// Reads up to `buffer.count` bytes (`read(2)`, repeated on `EINTR`); 0 at end of file.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        switch Errno.retryingInterrupted({ Glibc.read(rawValue, buffer.baseAddress, buffer.count) }) {
        case .success(let count): return count
        case .failure(let error): throw error
        }
    }

    /// Reads until end of file.
    public func readToEnd() throws(Errno) -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let result = chunk.withUnsafeMutableBytes { buffer in
                Errno.retryingInterrupted { Glibc.read(rawValue, buffer.baseAddress, buffer.count) }
            }
            let count: Int
            switch result {
            case .success(let read): count = read
            case .failure(let error): throw error
            }
            if count == 0 { return bytes }
            bytes.append(contentsOf: chunk[0..<count])
        }
    }

    /// Writes every byte of `bytes` (`write(2)`, repeated after short writes and on `EINTR`).
    public func writeAll<Bytes: Sequence>(_ bytes: Bytes) throws(Errno) where Bytes.Element == UInt8 {
        let result: Errno? = bytes.withContiguousStorageIfAvailable { buffer in
            Self.writeAll(rawValue, UnsafeRawBufferPointer(buffer))
        } ?? Array(bytes).withUnsafeBytes { Self.writeAll(rawValue, $0) }
        if let result { throw result }
    }

    /// Writes `text` as UTF-8.
    public func writeAll(_ text: String) throws(Errno) {
        var text = text
        let result = text.withUTF8 { Self.writeAll(rawValue, UnsafeRawBufferPointer($0)) }
        if let result { throw result }
    }

    private static func writeAll(_ descriptor: Int32, _ buffer: UnsafeRawBufferPointer) -> Errno? {
        var offset = 0
        while offset < buffer.count {
            switch Errno.retryingInterrupted({ Glibc.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset) }) {
            // Nothing written for a non-empty buffer would loop forever; no device is expected
            // to do it, but a stuck one is an I/O error, not a hang.
            case .success(0): return Errno(rawValue: EIO)
            case .success(let count): offset += count
            case .failure(let error): return error
            }
        }
        return nil
    }

    /// Closes the descriptor (`close(2)`). Not retried on `EINTR`: on Linux the descriptor is
    /// released even then, and a retry could close one another thread just opened.
    public func close() throws(Errno) {
        guard Glibc.close(rawValue) == 0 else { throw Errno.current }
    }
}
