import Glibc
import PropBus
import SystemKit

/// The file of `mandatory.d` that `Manager.Lock` and `Unlock` (`propctl lock`, `unlock`) edit:
/// `CONFIG/mandatory.d/50-propctl.json` (``LayerFiles/managedFileName``).
///
/// One edit is a read, a change and a durable replacement (``DurableFile``) under an exclusive
/// `flock(2)` on `mandatory.d` itself, so that two writers (two daemons reading the same
/// directory, a system and a session one) never lose each other's entries, and a crash leaves
/// the old file or the new one, never none: a lock is never undone by a crash.
public struct ManagedLayerFile {
    /// `CONFIG/mandatory.d`.
    public let directory: String
    /// The file.
    public let path: String
    /// How long an edit waits for another writer's lock before it gives up.
    public var lockTimeoutMilliseconds = 2_000

    /// The managed file under the configuration directory `configDirectory` (`--config-dir`).
    public init(configDirectory: String) {
        directory = configDirectory + "/mandatory.d"
        path = directory + "/" + LayerFiles.managedFileName
    }

    /// What an edit left in the file: its entries and problems, as a reload would read them.
    public struct Contents {
        public var entries: [LayerEntry]
        public var problems: [LayerProblem]
    }

    /// Locks `target` (a key, or a group prefix `GROUP.*`) to `value`, for the users and
    /// `@group`s of `lockedFor` (`nil`: everyone but privileged callers), or with `value` `nil`
    /// removes its entry; returns the file's entries as they are now. A file left without an
    /// entry is removed.
    ///
    /// Errors name the file and what to do: `InvalidArgs` for an unlock of a target the file
    /// does not hold, or a file that is not a JSON object (edited by hand); `StoreFailed` when
    /// the file cannot be written, naming the directory propbusd needs write access to.
    public func update(_ target: String, to value: JSONValue?, lockedFor: [String]?) throws(PropBusError) -> Contents {
        do throws(Errno) {
            try FileSystem.createDirectories(directory, mode: 0o755)
        } catch {
            throw cannotWrite(error)
        }
        let folder: FileDescriptor
        do { folder = try FileDescriptor.open(directory, O_RDONLY | O_DIRECTORY) } catch { throw cannotWrite(error) }
        defer { try? folder.close() }
        try lock(folder)
        // Read under the lock: another writer's entries are in what is read here.
        let current: String?
        do { current = String(decoding: try FileSystem.contents(of: path), as: UTF8.self) } catch {
            guard error == .noSuchFileOrDirectory else { throw cannotWrite(error) }
            current = nil
        }
        if value == nil, !Self.holds(current, target) {
            throw PropBusError(.invalidArgs, "\(target) is not locked by propctl lock (\(path) has no entry for it); other files of \(directory) are edited by hand")
        }
        let text: String
        do { text = try LayerFiles.managedText(current, setting: target, to: value, lockedFor: lockedFor) } catch {
            throw PropBusError(.invalidArgs, "\(path) \(error.problem)")
        }
        let parsed = LayerFiles.parse(text, path: path, layer: .mandatory)
        do throws(Errno) {
            if parsed.entries.isEmpty, parsed.problems.isEmpty {
                try DurableFile.remove(path)
            } else {
                try DurableFile.replace(path, with: Array(text.utf8), mode: 0o644)
            }
        } catch {
            throw cannotWrite(error)
        }
        return Contents(entries: parsed.entries, problems: parsed.problems)
    }

    /// Whether the file's text names `target`.
    private static func holds(_ text: String?, _ target: String) -> Bool {
        guard let text, let members = try? JSONValue.parse(text).objectMembers else { return false }
        return members.contains { $0.key == target }
    }

    /// An exclusive `flock` on the directory, waiting up to ``lockTimeoutMilliseconds`` for
    /// another writer (whose edit takes milliseconds).
    private func lock(_ folder: FileDescriptor) throws(PropBusError) {
        for _ in 0...max(0, lockTimeoutMilliseconds) {
            if flock(folder.rawValue, LOCK_EX | LOCK_NB) == 0 { return }
            guard errno == EWOULDBLOCK || errno == EINTR else { throw cannotWrite(Errno.current) }
            usleep(1_000)
        }
        throw PropBusError(.storeFailed, "cannot lock \(directory) to edit \(path): another writer held it for \(lockTimeoutMilliseconds) ms; try again")
    }

    private func cannotWrite(_ error: Errno) -> PropBusError {
        PropBusError(.storeFailed, "cannot write \(path): \(error); propbusd (uid \(geteuid())) needs write access to \(directory)")
    }
}
