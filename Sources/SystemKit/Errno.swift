import Glibc

/// A POSIX error number, as a thrown value: what `errno` held when a system call failed.
public struct Errno: Error, Equatable, Hashable, Sendable, CustomStringConvertible {
    /// The `errno` value, e.g. `ENOENT`.
    public var rawValue: Int32

    /// Wraps an error number.
    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// The calling thread's `errno`, read right after the failing call.
    public static var current: Errno { Errno(rawValue: errno) }

    /// `ENOENT`: no such file or directory.
    public static let noSuchFileOrDirectory = Errno(rawValue: ENOENT)
    /// `EEXIST`: the file exists.
    public static let fileExists = Errno(rawValue: EEXIST)
    /// `EINTR`: interrupted by a signal; the call is worth repeating.
    public static let interrupted = Errno(rawValue: EINTR)

    /// The C library's text for the error (`strerror`), e.g. "No such file or directory".
    public var description: String { String(cString: strerror(rawValue)) }

    /// Runs `body` (a system call that returns -1 and sets `errno` on failure) again while it is
    /// interrupted by a signal; the failure as an ``Errno``.
    @inlinable
    public static func retryingInterrupted<T: BinaryInteger>(_ body: () -> T) -> Result<T, Errno> {
        while true {
            let result = body()
            if result >= 0 { return .success(result) }
            if errno != EINTR { return .failure(.current) }
        }
    }
}
