import Glibc

/// Operations on paths, over the C library: what the daemon and propctl need from
/// FileManager, without linking Foundation.
public enum FileSystem {
    /// Whether something exists at `path` (`access(2)` with `F_OK`; a dangling symlink does not).
    public static func exists(_ path: String) -> Bool {
        access(path, F_OK) == 0
    }

    /// Whether `path` is a directory (`stat(2)`, following symlinks).
    public static func isDirectory(_ path: String) -> Bool {
        var status = stat()
        return stat(path, &status) == 0 && status.st_mode & S_IFMT == S_IFDIR
    }

    /// The whole content of the file at `path` (`open`, `read`, `close`).
    public static func contents(of path: String) throws(Errno) -> [UInt8] {
        let descriptor = try FileDescriptor.open(path, O_RDONLY)
        defer { try? descriptor.close() }
        return try descriptor.readToEnd()
    }

    /// Why ``regularFileContents(of:maximumSize:)`` read nothing.
    public enum RegularFileError: Error, Equatable, CustomStringConvertible {
        /// `open`, `fstat` or `read` failed.
        case system(Errno)
        /// Not a regular file: a FIFO, a device, a directory, a socket (named).
        case notRegular(String)
        /// Larger than the limit: its size, or (`growing`) the bytes read when it passed the limit.
        case tooLarge(Int, growing: Bool = false)

        public var description: String {
            switch self {
            case .system(let error): error.description
            case .notRegular(let kind): "it is \(kind), not a regular file"
            case .tooLarge(let size, let growing): growing ? "it grew to at least \(size) bytes while it was read" : "it is \(size) bytes"
            }
        }
    }

    /// The whole content of the regular file at `path` (symlinks followed), provided it holds
    /// at most `maximumSize` bytes.
    ///
    /// Opened with `O_NONBLOCK`, since opening a FIFO for reading waits for a writer, and
    /// checked with `fstat` on what was opened (not the path, which may change in between)
    /// before anything is read: a FIFO or a device (`/dev/zero` never ends) is refused
    /// unread. A file that grows past the limit while it is read is refused at the limit.
    public static func regularFileContents(of path: String, maximumSize: Int) throws(RegularFileError) -> [UInt8] {
        try regularFile(at: path, maximumSize: maximumSize).contents
    }

    /// Who owns a file and its permission bits (`st_uid`, `st_gid`, `st_mode & 07777`).
    public struct Ownership: Sendable, Equatable {
        public var userID: UInt32
        public var groupID: UInt32
        public var mode: UInt32

        public init(userID: UInt32, groupID: UInt32, mode: UInt32) {
            self.userID = userID
            self.groupID = groupID
            self.mode = mode
        }
    }

    /// ``regularFileContents(of:maximumSize:)``, with the owner and mode of the file that was
    /// read (`fstat` of the descriptor, not the path, which may change in between).
    public static func regularFile(at path: String, maximumSize: Int) throws(RegularFileError) -> (contents: [UInt8], ownership: Ownership) {
        let descriptor: FileDescriptor
        do { descriptor = try FileDescriptor.open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY) } catch { throw .system(error) }
        defer { try? descriptor.close() }
        var status = stat()
        guard fstat(descriptor.rawValue, &status) == 0 else { throw .system(.current) }
        switch status.st_mode & S_IFMT {
        case S_IFREG: break
        case S_IFIFO: throw .notRegular("a FIFO")
        case S_IFCHR: throw .notRegular("a character device")
        case S_IFBLK: throw .notRegular("a block device")
        case S_IFDIR: throw .notRegular("a directory")
        case S_IFSOCK: throw .notRegular("a socket")
        default: throw .notRegular("not a file")
        }
        guard Int(status.st_size) <= maximumSize else { throw .tooLarge(Int(status.st_size)) }
        let ownership = Ownership(userID: status.st_uid, groupID: status.st_gid, mode: status.st_mode & 0o7777)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Int(status.st_size))
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let result = chunk.withUnsafeMutableBytes { buffer in
                Errno.retryingInterrupted { Glibc.read(descriptor.rawValue, buffer.baseAddress, buffer.count) }
            }
            let count: Int
            switch result {
            case .success(let read): count = read
            case .failure(let error): throw .system(error)
            }
            if count == 0 { return (bytes, ownership) }
            guard bytes.count + count <= maximumSize else { throw .tooLarge(bytes.count + count, growing: true) }
            bytes.append(contentsOf: chunk[..<count])
        }
    }

    /// The names in `directory` (`opendir`/`readdir`), without `.` and `..`, in no order.
    public static func contentsOfDirectory(_ directory: String) throws(Errno) -> [String] {
        guard let stream = opendir(directory) else { throw Errno.current }
        defer { closedir(stream) }
        var names: [String] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != ".", name != ".." { names.append(name) }
        }
        return names
    }

    /// Creates `path` and any missing parents with `mode` (`mkdir(2)`, like `mkdir -p -m`); an
    /// existing directory is fine, an existing file is `EEXIST`. The mode of directories that
    /// already exist is left alone.
    public static func createDirectories(_ path: String, mode: mode_t) throws(Errno) {
        if isDirectory(path) { return }
        var parent = path
        while parent.hasSuffix("/"), parent.count > 1 { parent.removeLast() }
        if let slash = parent.lastIndex(of: "/"), slash != parent.startIndex {
            try createDirectories(String(parent[..<slash]), mode: mode)
        }
        guard mkdir(path, mode) == 0 else {
            let error = Errno.current
            // Another process may have made it in between; only a non-directory is an error.
            if error == .fileExists, isDirectory(path) { return }
            throw error
        }
        // mkdir applies the umask; the caller asked for exactly this mode.
        _ = chmod(path, mode)
    }

    /// Renames `source` to `destination` (`rename(2)`: atomic, on one file system).
    public static func rename(_ source: String, to destination: String) throws(Errno) {
        guard Glibc.rename(source, destination) == 0 else { throw Errno.current }
    }

    /// The working directory (`getcwd(3)`).
    public static var currentDirectory: String {
        guard let pointer = getcwd(nil, 0) else { return "/" }
        defer { free(pointer) }
        return String(cString: pointer)
    }

    /// `path` made absolute against the working directory, with `.`, `..` and repeated
    /// slashes removed textually (symlinks are not resolved), as `URL.standardized` did.
    public static func absolute(_ path: String) -> String {
        let full = path.hasPrefix("/") ? path : currentDirectory + "/" + path
        var parts: [Substring] = []
        for part in full.split(separator: "/", omittingEmptySubsequences: true) {
            switch part {
            case ".": continue
            case "..": if !parts.isEmpty { parts.removeLast() }
            default: parts.append(part)
            }
        }
        return "/" + parts.joined(separator: "/")
    }

    /// The directory part of an absolute path: everything before its last component.
    public static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// The last component of a path.
    public static func lastComponent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: slash)...])
    }
}
