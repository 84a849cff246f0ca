import Glibc

/// An exclusive `flock(2)` on `DIR/propbusd.lock`, held for the life of the daemon: one
/// propbusd per state directory. Two daemons sharing a store (one per bus, say, since the
/// default session store is the same for every `--address`) would hand out the same revisions
/// twice and overwrite each other's commits.
///
/// The lock goes with the process (the kernel drops it when the descriptor closes, on any exit),
/// so a crash never leaves a stale lock; the pid written into the file only names the holder in
/// the refusal.
public final class StateDirectoryLock {
    /// The lock file's name inside the state directory.
    public static let fileName = "propbusd.lock"

    /// The lock file.
    public let path: String
    private let descriptor: Int32

    /// Takes the lock without waiting. A lock held by another process throws `StoreFailed`
    /// naming the directory and the holder's pid; nothing in the directory is touched then.
    public init(directory: String) throws(PropBusError) {
        path = directory + "/" + Self.fileName
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            throw PropBusError(.storeFailed, "cannot open the lock file \(path): \(String(cString: strerror(errno)))")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let reason = errno
            let holder = Self.readHolder(descriptor)
            close(descriptor)
            guard reason == EWOULDBLOCK else {
                throw PropBusError(.storeFailed, "cannot lock \(path): \(String(cString: strerror(reason)))")
            }
            let who = holder.map { "propbusd pid \($0)" } ?? "another propbusd"
            throw PropBusError(.storeFailed, "the state directory \(directory) is in use by \(who) (lock \(path)); only one daemon may use a store; give this one another --state-dir")
        }
        self.descriptor = descriptor
        // Ours now: say who holds it, for the next daemon's refusal.
        let text = Array("\(getpid())\n".utf8)
        _ = ftruncate(descriptor, 0)
        _ = text.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, 0) }
    }

    deinit { close(descriptor) }

    private static func readHolder(_ descriptor: Int32) -> Int32? {
        var buffer = [UInt8](repeating: 0, count: 32)
        let count = buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return nil }
        return Int32(String(decoding: buffer[..<count].filter { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }, as: UTF8.self))
    }
}
