import Dispatch
import Glibc
import SystemKit

/// A file as inotify sees it, for ``FileEndpoint``: the name in its directory, the inode the
/// name holds (followed as it changes), other programs' opens of it, and the changes collected
/// and not delivered yet. It reads the file and folds events into that state; when to deliver
/// is the endpoint's business.
///
/// It is watched on both the directory and the file itself, so every way a program can change
/// it is seen: writes (`echo x > f`), truncation, atomic replacement by rename (what editors
/// do), deletion and re-creation, and writes through a symlink or a second hard link.
///
/// Confined to the endpoint's queue.
final class WatchedFile {
    let path: String
    let directory: String
    let name: String
    /// The inotify instance; -1 before ``open(on:)`` and after ``close()``.
    private(set) var inotify: Int32 = -1
    private var directoryWatch: Int32 = -1
    private var fileWatch: Int32 = -1
    /// A descriptor on the inode the file watch watches, opened before the watch was added and
    /// read with `pread`: propctl's own reads make no IN_OPEN or IN_CLOSE_NOWRITE. inotify
    /// merges an event into an identical one still unread, so an open of ours at the moment a
    /// writer opened used to swallow the writer's IN_OPEN, and ``openCount`` fell to 0 while
    /// the writer still held the file (its truncation was then read as the value).
    private var descriptor: Int32 = -1
    /// Device and inode of ``descriptor``: when the name shows another inode, it is followed.
    private var identity: (device: UInt64, inode: UInt64)?
    private var queue: DispatchQueue?
    /// A finished change (a writer's close, a rename onto the name, a deletion) collected and
    /// not delivered yet.
    var pendingComplete = false
    /// A modification collected since the last finished change: a write under way, even after a
    /// finished one in the same batch (`rm f; echo x > f`), so the finished one is not read
    /// while the next writer is between its open and its write.
    var pendingModified = false
    /// Opens of the file not yet closed, as the file watch saw them: while someone holds it
    /// open, a modification (a shell's `>` truncating before it writes) waits for the close
    /// rather than for a settle delay, which a loaded machine can outlast between the two.
    private var openCount = 0
    /// The name was created (IN_CREATE), or a read found a new inode there that no event had
    /// announced (see ``readFollowingTheName()``), and no close of it has been seen yet: its
    /// creator opened it before the file watch could, so ``openCount`` cannot tell.
    var creatorHoldsIt = false
    /// Opens of the file seen so far.
    private(set) var opensSeen = 0
    /// ``opensSeen`` when the last finished change was collected: an open after it, even one
    /// collected before the read, may be a writer the read catches half-way.
    private(set) var opensAtFinish = 0
    /// Where ``collectEvents()`` reads events, kept: it runs after every read of the file too.
    private var events = InotifyEventReader()

    static let fileMask = UInt32(IN_OPEN | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE | IN_MODIFY | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF)

    init(path: String) {
        let absolute = FileSystem.absolute(path)
        self.path = absolute
        self.directory = FileSystem.directory(of: absolute)
        self.name = FileSystem.lastComponent(of: absolute)
    }

    /// Whether another program is known to hold the file open: a modification then waits for
    /// its close.
    var isHeldOpen: Bool { openCount > 0 || creatorHoldsIt }

    /// Starts watching (the directory, then the inode the name holds); returns the inotify
    /// descriptor to wait on.
    func open(on queue: DispatchQueue) throws(CommandFailure) -> Int32 {
        self.queue = queue
        inotify = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard inotify >= 0 else { throw CommandFailure(.dbusError, "inotify_init1: \(String(cString: strerror(errno)))") }
        // The directory watch sees the name: creation, replacement by rename, deletion, and
        // every write to whatever file has that name now.
        let directoryMask = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE | IN_MODIFY | IN_ATTRIB | IN_ONLYDIR
        directoryWatch = inotify_add_watch(inotify, directory, UInt32(directoryMask))
        guard directoryWatch >= 0 else {
            let reason = String(cString: strerror(errno))
            Glibc.close(inotify)
            inotify = -1
            throw CommandFailure(.usage, "cannot watch the directory \(directory) of --file: \(reason)")
        }
        followName()
        return inotify
    }

    /// The file watch sees writes through other names (a symlink, a hard link). It follows the
    /// inode, so it is set again whenever the name gets a new inode: the new inode is opened
    /// first and watched through that descriptor, so the open is no event and the watch is on
    /// exactly the inode held even if the name moves on meanwhile. The old watch goes before
    /// the old descriptor is closed, so that close is no event either.
    private func followName() {
        var status = stat()
        let now = stat(path, &status) == 0 ? (device: UInt64(status.st_dev), inode: UInt64(status.st_ino)) : nil
        if let now, let identity, now == identity { return }
        releaseFile()
        guard now != nil else { return }
        let opened = Glibc.open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY)
        guard opened >= 0 else { return }
        guard fstat(opened, &status) == 0 else {
            Glibc.close(opened)
            return
        }
        descriptor = opened
        identity = (UInt64(status.st_dev), UInt64(status.st_ino))
        var watch = inotify_add_watch(inotify, "/proc/self/fd/\(opened)", Self.fileMask)
        // Without /proc the name is watched: the name may move on in between, which the next
        // read notices (it compares the name's inode with the one held).
        if watch < 0 { watch = inotify_add_watch(inotify, path, Self.fileMask) }
        fileWatch = watch >= 0 ? watch : -1
    }

    /// Stops watching the inode followed so far and closes its descriptor; a new inode starts
    /// with no open counted (its writer's IN_OPEN may have come before the watch).
    private func releaseFile() {
        if fileWatch >= 0 { inotify_rm_watch(inotify, fileWatch) }
        fileWatch = -1
        if descriptor >= 0 {
            // Closing the last hold on a replaced inode frees it (about 20 µs): after the
            // delivery under way, not before it.
            let old = descriptor
            if let queue { queue.async { Glibc.close(old) } } else { Glibc.close(old) }
        }
        descriptor = -1
        identity = nil
        openCount = 0
        creatorHoldsIt = false
    }

    /// Follows `replacement`, a descriptor on the inode propctl is about to rename onto the
    /// name, opened before anything watched it, so that neither that open nor the rename's
    /// events are taken for another program's. Returns whether it did; on `false` the caller
    /// still owns the descriptor and must undo the watch it got with ``watch(_:)``.
    func adopt(_ replacement: Int32, watch: Int32) -> Bool {
        var status = stat()
        guard fstat(replacement, &status) == 0 else { return false }
        releaseFile()
        descriptor = replacement
        identity = (UInt64(status.st_dev), UInt64(status.st_ino))
        fileWatch = watch
        return true
    }

    /// A file watch on the inode open at `descriptor` (-1 when none could be added).
    func watch(_ descriptor: Int32) -> Int32 { inotify_add_watch(inotify, "/proc/self/fd/\(descriptor)", Self.fileMask) }

    /// Removes a watch ``watch(_:)`` added that was not adopted.
    func unwatch(_ watch: Int32) { if watch >= 0 { inotify_rm_watch(inotify, watch) } }

    /// Reads every queued inotify event about the file into ``pendingComplete`` and
    /// ``pendingModified``; whether there was any.
    @discardableResult
    func collectEvents() -> Bool {
        var seen = false
        events.readAll(from: inotify) { event in
            if collect(event) { seen = true }
        }
        return seen
    }

    /// Folds one event into the pending state; whether it was about the file.
    private func collect(_ event: InotifyEventReader.Event) -> Bool {
        let mask = event.mask
        if mask & UInt32(IN_Q_OVERFLOW) != 0 {
            finished()
            return true
        }
        if event.watch == directoryWatch {
            guard event.name == name else { return false }
            if mask & UInt32(IN_CREATE | IN_MOVED_TO) != 0 { followName() }
            if mask & UInt32(IN_CREATE) != 0 { creatorHoldsIt = true }
            // A file renamed onto the name is complete: nobody is still creating it.
            if mask & UInt32(IN_CLOSE_WRITE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO) != 0 { creatorHoldsIt = false }
            if mask & UInt32(IN_CLOSE_WRITE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM) != 0 { finished() }
            if mask & UInt32(IN_MODIFY | IN_ATTRIB | IN_CREATE) != 0 { pendingModified = true }
            return true
        }
        guard event.watch == fileWatch else { return false }
        // Our reads open nothing (they use the descriptor held); an in-place write
        // of ours opens and closes the file like any writer.
        if mask & UInt32(IN_OPEN) != 0 {
            openCount += 1
            opensSeen += 1
        }
        // A writer's close with no open counted is the close of one that opened the inode
        // before it was watched: its creator, when no directory event can say so (a
        // symlink's target in a directory not watched).
        if mask & UInt32(IN_CLOSE_WRITE) != 0, openCount == 0 { creatorHoldsIt = false }
        if mask & UInt32(IN_CLOSE_WRITE | IN_CLOSE_NOWRITE) != 0 { openCount = max(0, openCount - 1) }
        // Opens and reads change nothing.
        guard mask & ~UInt32(IN_OPEN | IN_CLOSE_NOWRITE) != 0 else { return false }
        if mask & UInt32(IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF) != 0 {
            if mask & UInt32(IN_IGNORED) != 0 { fileWatch = -1 }
            finished()
        }
        if mask & UInt32(IN_CLOSE_WRITE) != 0 { finished() }
        if mask & UInt32(IN_MODIFY) != 0 { pendingModified = true }
        if mask & UInt32(IN_ATTRIB) != 0 {
            // The inode lost its last name (a symlink's target deleted or replaced):
            // our descriptor keeps it alive, so this stands for IN_DELETE_SELF.
            if isUnlinked { finished() } else { pendingModified = true }
        }
        return true
    }

    private func finished() {
        pendingComplete = true
        pendingModified = false
        opensAtFinish = opensSeen
    }

    /// Whether the inode held has no name left.
    private var isUnlinked: Bool {
        var status = stat()
        return descriptor >= 0 && fstat(descriptor, &status) == 0 && status.st_nlink == 0
    }

    /// Reads what the name holds now, without its trailing newline: the inode held, after
    /// following the name if it moved on before its event was handled (a `stat` is no inotify
    /// event; an open would be one). `nil`: no file.
    func read() -> String? {
        guard inotify >= 0 else { return nil }
        waitAtReadGate()
        followName()
        guard descriptor >= 0 else { return nil }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let offset = off_t(bytes.count)
            let count = chunk.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, offset) }
            if count < 0, errno == EINTR { continue }
            if count <= 0 { break }
            bytes.append(contentsOf: chunk[0..<count])
        }
        if bytes.last == UInt8(ascii: "\n") { bytes.removeLast() }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// ``read()``, and whether the read followed the name to an inode that no event has
    /// announced: its IN_CREATE or IN_MOVED_TO may still be on its way (ext4 makes a new name
    /// visible before it queues the event), and a symlink's target in a directory not watched
    /// sends none. Its creator may then be between its open and its write.
    func readFollowingTheName() -> (text: String?, foundUnannounced: Bool) {
        let before = identity
        let text = read()
        guard let now = identity else { return (text, false) }
        return (text, before.map { $0 != now } ?? true)
    }

    /// Test only (`PROPCTL_TEST_FILE_READ_GATE=PATH`): while PATH exists, a read of the file
    /// stops before it looks at the name, says so on stderr and waits (10 s at most) for PATH to
    /// go, so a test can have another program open or create the file at exactly that moment.
    private static let readGate = Environment.value("PROPCTL_TEST_FILE_READ_GATE")

    private func waitAtReadGate() {
        guard let gate = Self.readGate, access(gate, F_OK) == 0 else { return }
        Output.error("propctl bind: test gate: a read of \(path) waits until \(gate) is removed")
        for _ in 0..<10_000 where access(gate, F_OK) == 0 { usleep(1_000) }
    }

    /// Stops watching and closes every descriptor but the inotify one, which the caller closes
    /// once nothing waits on it; returns it (-1 when closed already).
    func close() -> Int32 {
        let descriptor = inotify
        if inotify >= 0 { releaseFile() }
        inotify = -1
        return descriptor
    }
}
