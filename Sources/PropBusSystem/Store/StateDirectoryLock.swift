import Glibc
import PropBus
import SystemKit

/// An exclusive `flock(2)` on the state directory itself, and on `DIR/propbusd.lock`, held for
/// the life of the daemon: one propbusd per state directory. Two daemons sharing a store (one
/// per bus, say, since the default session store is the same for every `--address`) would hand
/// out the same revisions twice and overwrite each other's commits.
///
/// The directory is what decides: a lock file can be unlinked from under a running daemon (by
/// anyone who may write the directory), and the next daemon would make a new one and lock it;
/// the directory cannot go while it holds the store. The file lock is kept so that a daemon of
/// an earlier version, which locks only the file, is refused too, and the file names the holder.
///
/// The locks go with the process (the kernel drops them when the descriptors close, on any
/// exit), so a crash never leaves a stale lock; the pid written into the file only names the
/// holder in the refusal (when the file is gone, `/proc/locks` names it). A lock file that this
/// user may not open (left by root) is replaced once the directory is locked.
public final class StateDirectoryLock {
    /// The lock file's name inside the state directory.
    public static let fileName = "propbusd.lock"

    /// The lock file.
    public let path: String
    private let directoryDescriptor: Int32
    private let descriptor: Int32

    /// Takes the lock without waiting. A lock held by another process throws `StoreFailed`
    /// naming the directory and the holder's pid; nothing in the directory is touched then.
    public init(directory: String) throws(PropBusError) {
        path = directory + "/" + Self.fileName
        let directoryDescriptor = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directoryDescriptor >= 0 else {
            throw PropBusError(.storeFailed, "cannot open the state directory \(directory): \(String(cString: strerror(errno)))")
        }
        do throws(PropBusError) {
            try Self.lock(directoryDescriptor, directory: directory, lockFile: path) { Self.holder(locking: directoryDescriptor) }
        } catch {
            close(directoryDescriptor)
            throw error
        }
        var descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        if descriptor < 0, errno == EACCES || errno == EPERM {
            // A file another user left (root's `propbusd --system` that could not own the
            // name): the directory's lock is ours, so no daemon uses it; make our own.
            unlink(path)
            descriptor = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        }
        guard descriptor >= 0 else {
            let reason = errno
            close(directoryDescriptor)
            throw PropBusError(.storeFailed, "cannot open the lock file \(path): \(String(cString: strerror(reason)))")
        }
        do throws(PropBusError) {
            try Self.lock(descriptor, directory: directory, lockFile: path) { nil }
        } catch {
            close(descriptor)
            close(directoryDescriptor)
            throw error
        }
        Self.giveToDirectoryOwner(descriptor, directory: directoryDescriptor)
        self.directoryDescriptor = directoryDescriptor
        self.descriptor = descriptor
        // Ours now: say who holds it, for the next daemon's refusal.
        let text = Array("\(getpid())\n".utf8)
        _ = ftruncate(descriptor, 0)
        _ = text.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, 0) }
    }

    deinit {
        close(descriptor)
        close(directoryDescriptor)
    }

    /// Run as root in another user's state directory (`/var/lib/propbus`), gives the lock file
    /// to that user, so that nothing root-owned is left where the service runs as its own user.
    private static func giveToDirectoryOwner(_ descriptor: Int32, directory: Int32) {
        var owner = stat()
        guard geteuid() == 0, fstat(directory, &owner) == 0, owner.st_uid != 0 else { return }
        _ = fchown(descriptor, owner.st_uid, owner.st_gid)
    }

    /// `flock(descriptor, LOCK_EX | LOCK_NB)`, or the refusal naming the directory and the
    /// holder: the pid in the lock file, else `otherHolder()`.
    private static func lock(_ descriptor: Int32, directory: String, lockFile: String, otherHolder: () -> Int32?) throws(PropBusError) {
        guard flock(descriptor, LOCK_EX | LOCK_NB) != 0 else { return }
        let reason = errno
        guard reason == EWOULDBLOCK else {
            throw PropBusError(.storeFailed, "cannot lock the state directory \(directory): \(String(cString: strerror(reason)))")
        }
        let who = (readHolder(lockFile) ?? otherHolder()).map { "propbusd pid \($0)" } ?? "another propbusd"
        throw PropBusError(.storeFailed, "the state directory \(directory) is in use by \(who) (lock \(lockFile)); only one daemon may use a store; give this one another --state-dir")
    }

    /// The pid written in the lock file, if it exists and holds one.
    private static func readHolder(_ path: String) -> Int32? {
        guard let bytes = try? FileSystem.contents(of: path) else { return nil }
        return Int32(String(decoding: bytes.prefix(32).filter { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }, as: UTF8.self))
    }

    /// The pid holding a `flock` on the file open at `descriptor`, from `/proc/locks`
    /// (`1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF`: pid, then major:minor:inode).
    private static func holder(locking descriptor: Int32) -> Int32? {
        var info = stat()
        guard fstat(descriptor, &info) == 0, let bytes = try? FileSystem.contents(of: "/proc/locks") else { return nil }
        let device = UInt64(info.st_dev)
        let major = ((device >> 8) & 0xfff) | ((device >> 32) & ~0xfff)
        let minor = (device & 0xff) | ((device >> 12) & ~0xff)
        let file = hex(major) + ":" + hex(minor) + ":" + String(info.st_ino)
        for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") {
            let fields = line.split(separator: " ")
            if fields.count >= 6, fields[1] == "FLOCK", fields[5] == file { return Int32(fields[4]) }
        }
        return nil
    }

    /// At least two hex digits, as the kernel prints a device number in `/proc/locks`.
    private static func hex(_ value: UInt64) -> String {
        let digits = String(value, radix: 16)
        return digits.count < 2 ? "0" + digits : digits
    }
}
