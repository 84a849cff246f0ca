import Glibc

/// Replacing a file whole, so that a reader sees the old content or the new and a crash leaves
/// one of them: a temporary file of a unique name in the same directory (as `mkstemp(3)`), written
/// and `fsync(2)`ed, then `rename(2)`d over the name, then the directory `fsync`ed so the rename
/// itself is on disk.
///
/// A fixed temporary name (`NAME.tmp`) would let two writers truncate each other's file, and a
/// rename without the fsyncs can leave an empty file after a crash on ext4 and XFS.
public enum DurableFile {
    /// Writes `bytes` to a new file of a unique name beside `path` (`.NAME.RANDOM`: hidden, and
    /// not named like the files it stands beside), with `mode` (not masked by the umask), and
    /// fsyncs and closes it. Returns its path; the caller renames it (``commit(_:to:)``) or
    /// unlinks it.
    public static func writeTemporary(beside path: String, _ bytes: [UInt8], mode: mode_t) throws(Errno) -> String {
        let directory = FileSystem.directory(of: path), name = FileSystem.lastComponent(of: path)
        var temporary = "", file = FileDescriptor(rawValue: -1)
        // mkstemp's way, with close-on-exec from the start (a command spawned meanwhile must
        // not inherit it): a random name, created exclusively, another on a collision.
        for attempt in 0... {
            let suffix = String(UInt64.random(in: 0...UInt64.max), radix: 36)
            temporary = "\(directory)/.\(name).\(suffix)"
            do { file = try FileDescriptor.open(temporary, O_WRONLY | O_CREAT | O_EXCL, mode: 0o600); break } catch {
                if error != .fileExists || attempt >= 100 { throw error }
            }
        }
        let descriptor = file.rawValue
        do throws(Errno) {
            guard fchmod(descriptor, mode) == 0 else { throw Errno.current }
            try file.writeAll(bytes)
            guard fsync(descriptor) == 0 else { throw Errno.current }
            try file.close()
        } catch {
            try? file.close()
            unlink(temporary)
            throw error
        }
        return temporary
    }

    /// Renames `temporary` to `path` and fsyncs their directory; on failure `temporary` is
    /// unlinked.
    public static func commit(_ temporary: String, to path: String) throws(Errno) {
        guard Glibc.rename(temporary, path) == 0 else {
            let error = Errno.current
            unlink(temporary)
            throw error
        }
        try syncDirectory(of: path)
    }

    /// Replaces the file at `path` with `bytes` (``writeTemporary(beside:_:mode:)``, then
    /// ``commit(_:to:)``).
    public static func replace(_ path: String, with bytes: [UInt8], mode: mode_t) throws(Errno) {
        try commit(try writeTemporary(beside: path, bytes, mode: mode), to: path)
    }

    /// Unlinks `path` and fsyncs its directory, so that the removal is on disk.
    public static func remove(_ path: String) throws(Errno) {
        guard unlink(path) == 0 else { throw Errno.current }
        try syncDirectory(of: path)
    }

    /// `fsync(2)` on the directory holding `path`: a rename or unlink is durable only then.
    public static func syncDirectory(of path: String) throws(Errno) {
        let directory = try FileDescriptor.open(FileSystem.directory(of: path), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { try? directory.close() }
        guard fsync(directory.rawValue) == 0 else { throw Errno.current }
    }
}
