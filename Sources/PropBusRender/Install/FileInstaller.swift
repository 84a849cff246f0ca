import Glibc
import SystemKit

/// A file as it was: its bytes, owner and mode, to compare a render with and to put back.
public struct FileVersion: Sendable, Equatable {
    public var bytes: [UInt8]
    public var ownership: FileSystem.Ownership

    public init(bytes: [UInt8], ownership: FileSystem.Ownership) {
        self.bytes = bytes
        self.ownership = ownership
    }
}

/// A rendered file written beside its destination, complete and synced, not installed yet.
public struct StagedFile: Sendable, Equatable {
    /// The temporary file, in the destination's directory (so the rename is atomic).
    public var path: String
    public var destination: String
    /// What the destination held before (`nil`: nothing), to put back if the reload fails.
    public var previous: FileVersion?
}

/// Why a file could not be staged, installed or put back. Names paths and calls, never content.
public struct InstallError: Error, Sendable, Equatable {
    public var message: String

    public init(_ message: String) {
        self.message = message
    }
}

/// Writes rendered files so that no reader ever sees a torn, wrong-owner or unchecked one:
/// a temporary file in the destination's directory gets its owner and mode before its first
/// byte (`fchown`, `fchmod`), then the bytes and an `fsync`; only after the check is it renamed
/// over the destination, and the directory is synced. Blocking calls: run off the daemon's queue.
public enum FileInstaller {
    /// The largest existing file read to compare with and to keep for putting back.
    public static let maximumPreviousSize = 64 << 20

    /// What `destination` holds now; `nil` when nothing is there. A symbolic link or anything
    /// but a regular file is refused: a rename would replace the link, not what it points to.
    public static func current(at destination: String) throws(InstallError) -> FileVersion? {
        var status = stat()
        if lstat(destination, &status) != 0 {
            let error = Errno.current
            if error.rawValue == ENOENT { return nil }
            throw InstallError("cannot look at \(destination): \(error)")
        }
        guard status.st_mode & S_IFMT != S_IFLNK else {
            throw InstallError("\(destination) is a symbolic link: a render replaces the file itself, so name the file the link points to as the destination")
        }
        let read: (contents: [UInt8], ownership: FileSystem.Ownership)
        do { read = try FileSystem.regularFile(at: destination, maximumSize: maximumPreviousSize) } catch {
            throw InstallError("cannot read \(destination) to compare with: \(error)")
        }
        return FileVersion(bytes: read.contents, ownership: read.ownership)
    }

    /// Writes `version` into a new temporary file beside `destination`: owner and mode first,
    /// then every byte, then `fsync` (``DurableFile/writeTemporary(beside:_:mode:owner:tag:)``).
    /// Returns its path; nothing is left behind on failure.
    public static func stage(_ version: FileVersion, beside destination: String) throws(InstallError) -> String {
        let target = version.ownership
        // Only root may give a file away: a daemon writing its own files does not ask.
        let owner = target.userID != geteuid() || target.groupID != getegid() ? (target.userID, target.groupID) : nil
        do {
            return try DurableFile.writeTemporary(beside: destination, version.bytes, mode: mode_t(target.mode), owner: owner, tag: tag)
        } catch {
            let whose = owner.map { " owned by uid \($0.0), gid \($0.1) (propbusd runs as uid \(geteuid()))" } ?? ""
            throw InstallError("cannot stage \(destination) in its directory\(whose), mode \(String(target.mode, radix: 8).leftPadded(to: 4)): \(error)")
        }
    }

    /// Puts the staged file in place: `rename` over the destination, then `fsync` of the
    /// directory, so the new name survives a crash.
    public static func install(_ staged: StagedFile) throws(InstallError) {
        do { try DurableFile.commit(staged.path, to: staged.destination) } catch {
            throw InstallError("cannot rename \(staged.path) to \(staged.destination) and sync its directory: \(error)")
        }
    }

    /// Removes a staged file that will not be installed.
    public static func discard(_ staged: StagedFile) {
        unlink(staged.path)
    }

    /// Puts `previous` back at `destination` the same way (staged, renamed, synced), or
    /// removes the file when there was none before.
    public static func restore(_ previous: FileVersion?, at destination: String) throws(InstallError) {
        guard let previous else {
            do { try DurableFile.remove(destination) } catch {
                if error != .noSuchFileOrDirectory { throw InstallError("cannot remove \(destination): \(error)") }
            }
            return
        }
        let path = try stage(previous, beside: destination)
        try install(StagedFile(path: path, destination: destination, previous: nil))
    }

    /// Removes temporary files a daemon killed in the middle of a render left beside `destination`.
    /// Returns their names.
    @discardableResult
    public static func removeLeftovers(of destination: String) -> [String] {
        let directory = FileSystem.directory(of: destination)
        let prefix = temporaryPrefix(for: destination)
        // Exactly the staged files' names: the random part is [0-9a-z] (the reload note has a '-').
        let names = ((try? FileSystem.contentsOfDirectory(directory)) ?? []).filter { name in
            name.hasPrefix(prefix) && name.utf8.count > prefix.utf8.count
                && name.utf8.dropFirst(prefix.utf8.count).allSatisfy { (48...57).contains($0) || (97...122).contains($0) }
        }
        for name in names { unlink(directory + "/" + name) }
        return names
    }

    /// `.NAME.propbus-reload-due` beside `NAME`: a file installed whose `reload` has not succeeded
    /// yet. Made (and synced with the rename) before the file is renamed into place, removed once
    /// the reload succeeded: a daemon killed in between reloads at its next start, even though
    /// the file then holds what the keys give.
    public static func reloadMarker(for destination: String) -> String {
        FileSystem.directory(of: destination) + "/" + temporaryPrefix(for: destination) + "reload-due"
    }

    /// Notes that `destination`'s reload is due (``reloadMarker(for:)``).
    public static func markReloadDue(_ destination: String) throws(InstallError) {
        let path = reloadMarker(for: destination)
        do { try FileDescriptor.open(path, O_WRONLY | O_CREAT | O_NOFOLLOW, mode: 0o600).close() } catch {
            throw InstallError("cannot create \(path): \(error)")
        }
    }

    /// Whether a reload of `destination` was due when a daemon stopped.
    public static func isReloadDue(_ destination: String) -> Bool { FileSystem.exists(reloadMarker(for: destination)) }

    /// `destination` was reloaded: the note goes.
    public static func clearReloadDue(_ destination: String) {
        unlink(reloadMarker(for: destination))
    }

    /// A staged file is `.NAME.propbus-RANDOM` beside `NAME`: hidden, and telling whose it is.
    static let tag = "propbus-"

    static func temporaryPrefix(for destination: String) -> String {
        "." + FileSystem.lastComponent(of: destination) + "." + tag
    }
}
