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
