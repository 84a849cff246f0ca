import Dispatch
import Glibc
import SystemKit

/// A file whose content, without its trailing newline, is the local value.
///
/// It is watched with inotify on both the directory and the file itself, so every way a program
/// can change it is seen: writes (`echo x > f`), truncation, atomic replacement by rename (what
/// editors do), deletion and re-creation, and writes through a symlink or a second hard link.
///
/// A half-written file is never a value: a modification waits for its writer's close (the
/// file watch counts other programs' opens; propctl's own reads open nothing, they `pread` a
/// descriptor held per inode) or settles, and a read that a new write may have overlapped is
/// not delivered.
///
/// Values from the bus are written atomically (a temporary file in the same directory, then
/// `rename`), or in place with `inPlace` for sysfs-like files that cannot be replaced. Either
/// way the text is followed by one newline.
///
/// Confined to the channel's queue (see ``LocalEndpoint``); the work it schedules runs there too.
final class FileEndpoint: LocalEndpoint {
    // What the writing side (FileEndpoint+Writing.swift) uses is internal rather than private,
    // as Swift's `private` does not reach an extension in another file.
    let path: String
    let directory: String
    let name: String
    let inPlace: Bool
    var inotify: Int32 = -1
    private var directoryWatch: Int32 = -1
    var fileWatch: Int32 = -1
    /// A descriptor on the inode the file watch watches, opened before the watch was added and
    /// read with `pread`: propctl's own reads make no IN_OPEN or IN_CLOSE_NOWRITE. inotify
    /// merges an event into an identical one still unread, so an open of ours at the moment a
    /// writer opened used to swallow the writer's IN_OPEN, and ``openCount`` fell to 0 while
    /// the writer still held the file (its truncation was then read as the value).
    var descriptor: Int32 = -1
    /// Device and inode of ``descriptor``: when the name shows another inode, it is followed.
    var identity: (device: UInt64, inode: UInt64)?
    private var source: DispatchSourceRead?
    private var queue: DispatchQueue?
    var changed: ((String?) -> Void)?
    var settle: DispatchWorkItem?
    /// Whether ``settle`` waits the long delay, for a program holding the file open.
    private var settleIsLong = false
    /// A finished change (a writer's close, a rename onto the name, a deletion) collected and
    /// not delivered yet.
    var pendingComplete = false
    /// A modification collected since the last finished change: a write under way, even after a
    /// finished one in the same batch (`rm f; echo x > f`), so the finished one is not read
    /// while the next writer is between its open and its write.
    var pendingModified = false
    /// Opens of the file not yet closed, as the file watch saw them: while someone holds it
    /// open, a modification (a shell's `>` truncating before it writes) waits for the close
    /// rather than for ``settleDelay``, which a loaded machine can outlast between the two.
    private var openCount = 0
    /// The name was created (IN_CREATE), or a read found a new inode there that no event had
    /// announced (see ``readFollowingTheName()``), and no close of it has been seen yet: its
    /// creator opened it before the file watch could, so ``openCount`` cannot tell.
    private var creatorHoldsIt = false
    /// Looks at the file waiting for ``isHeldOpen`` to turn false (``afterQuiet(_:)``), and the
    /// deadline after which they run anyway.
    private var quietWork: [() -> Void] = []
    private var quietDeadline: DispatchWorkItem?
    /// Opens of the file seen so far, and changes delivered so far (see ``deliverNow()``).
    private var opensSeen = 0
    /// ``opensSeen`` when the last finished change was collected: an open after it, even one
    /// collected before the read, may be a writer the read catches half-way.
    private var opensAtFinish = 0
    private var deliveries = 0
    /// The content as of the last change the channel was told about, or the last write.
    ///
    /// Not used to decide whether a value propagates (that is always a comparison with current
    /// values): only to notice a change whose inotify event is not there yet, since a write
    /// becomes visible before its event does (and sysfs files send none). A bus value is not
    /// written over such a change; the change is delivered first.
    var notified: String?
    /// Where ``collectEvents()`` reads events, kept: it runs after every read of the file too.
    private var events = InotifyEventReader()

    /// Whether another program is known to hold the file open: a modification then waits for
    /// its close.
    private var isHeldOpen: Bool { openCount > 0 || creatorHoldsIt }

    /// How long a modification without a close must stay quiet before the file is read: a
    /// writer between its truncation and its write must not be read half-way.
    static let settleDelay: DispatchTimeInterval = .milliseconds(30)
    /// How long a modification waits for the close of a file someone holds open (a reader that
    /// keeps it open must not hold a bare truncation back for good).
    static let openSettleDelay: DispatchTimeInterval = .seconds(1)

    init(path: String, inPlace: Bool) {
        let absolute = FileSystem.absolute(path)
        self.path = absolute
        self.directory = FileSystem.directory(of: absolute)
        self.name = FileSystem.lastComponent(of: absolute)
        self.inPlace = inPlace
    }

    var label: String { "file \(path)" }

    func start(on queue: DispatchQueue, changed: @escaping (String?) -> Void,
               ended: @escaping (CommandFailure?) -> Void) throws(CommandFailure) {
        dispatchPrecondition(condition: .onQueue(queue))
        self.queue = queue
        self.changed = changed
        inotify = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard inotify >= 0 else { throw CommandFailure(.dbusError, "inotify_init1: \(String(cString: strerror(errno)))") }
        // The directory watch sees the name: creation, replacement by rename, deletion, and
        // every write to whatever file has that name now.
        let directoryMask = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE | IN_MODIFY | IN_ATTRIB | IN_ONLYDIR
        directoryWatch = inotify_add_watch(inotify, directory, UInt32(directoryMask))
        guard directoryWatch >= 0 else {
            let reason = String(cString: strerror(errno))
            close(inotify)
            throw CommandFailure(.usage, "cannot watch the directory \(directory) of --file: \(reason)")
        }
        followName()
        notified = current()
        let source = DispatchSource.makeReadSource(fileDescriptor: inotify, queue: queue)
        source.setEventHandler { [weak self] in self?.readEvents() }
        source.resume()
        self.source = source
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
        let opened = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY)
        guard opened >= 0 else { return }
        guard fstat(opened, &status) == 0 else {
            close(opened)
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

    static let fileMask = UInt32(IN_OPEN | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE | IN_MODIFY | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF)

    /// Stops watching the inode followed so far and closes its descriptor; a new inode starts
    /// with no open counted (its writer's IN_OPEN may have come before the watch).
    func releaseFile() {
        if fileWatch >= 0 { inotify_rm_watch(inotify, fileWatch) }
        fileWatch = -1
        if descriptor >= 0 {
            // Closing the last hold on a replaced inode frees it (about 20 µs): after the
            // delivery under way, not before it.
            let old = descriptor
            if let queue { queue.async { close(old) } } else { close(old) }
        }
        descriptor = -1
        identity = nil
        openCount = 0
        creatorHoldsIt = false
    }

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

    /// A finished write or a rename onto the name is a change now; a modification (even after
    /// a finished change) is one once its writer closes the file or it settles.
    private func deliverCollected() {
        if pendingModified {
            pendingModified = false
            pendingComplete = false
            scheduleSettle()
        } else if pendingComplete {
            deliverNow(opensBefore: opensAtFinish)
        }
    }

    /// Reads the file and delivers it as a change, unless a write began meanwhile.
    ///
    /// A modification collected right after the read (`rm f; echo x > f` creating the file anew
    /// while its deletion was read) may have been read half-way: its close or settle delivers
    /// instead. An open collected then may be a writer that has truncated the file before its
    /// IN_MODIFY was queued: the file is read again once nobody holds it open (a writer's
    /// close delivers anyway). That wait is no settle: ``isBeingWritten`` stays false, as the
    /// opener may be a mere reader and a bus value must not wait behind it.
    ///
    /// `opensBefore` is the count of opens when the finished change being delivered was
    /// collected: an open collected with it but after it (a program opening the file propctl
    /// just renamed into place) counts as one collected after the read.
    private func deliverNow(opensBefore: Int? = nil) {
        var text: String?
        var opensBefore = opensBefore
        // Kept over the reads again: an event collected meanwhile may be an older one (the
        // deletion before the creation), not the one that announces the inode.
        var unannounced = false
        for _ in 0..<8 {
            let opens = opensBefore ?? opensSeen
            opensBefore = nil
            pendingComplete = false
            let read = readFollowingTheName()
            text = read.text
            if read.foundUnannounced { unannounced = true }
            collectEvents()
            if pendingModified {
                pendingModified = false
                pendingComplete = false
                scheduleSettle()
                return
            }
            if opensSeen != opens {
                guard isHeldOpen else { continue }
                let delivered = deliveries
                afterQuiet { [weak self] in
                    guard let self, deliveries == delivered else { return }
                    deliverNow()
                }
                return
            }
            if !pendingComplete {
                if unannounced {
                    awaitUnannouncedCreator()
                    return
                }
                break
            }
            // Another finished change (a second rename): read again.
        }
        pendingComplete = false
        settle?.cancel()
        settle = nil
        notified = text
        deliveries += 1
        changed?(text)
    }

    /// Reads the file (``current()``), and whether the read followed the name to an inode that
    /// no event has announced: its IN_CREATE or IN_MOVED_TO may still be on its way (ext4 makes
    /// a new name visible before it queues the event), and a symlink's target in a directory
    /// not watched sends none. Its creator may then be between its open and its write.
    private func readFollowingTheName() -> (text: String?, foundUnannounced: Bool) {
        let before = identity
        let text = current()
        guard let now = identity else { return (text, false) }
        return (text, before.map { $0 != now } ?? true)
    }

    /// What was read of an unannounced inode is no value yet: wait as for a creation, until the
    /// creator's close, the name's rename event or ``openSettleDelay``.
    private func awaitUnannouncedCreator() {
        creatorHoldsIt = true
        scheduleSettle()
    }

    /// Delivers a change once the file has been quiet for ``settleDelay``, or for
    /// ``openSettleDelay`` while another program holds it open: that writer's close comes first,
    /// even when the change was seen before its IN_MODIFY (by ``write(_:)``).
    func scheduleSettle() {
        guard let queue else { return }
        settleIsLong = isHeldOpen
        let delay = settleIsLong ? Self.openSettleDelay : Self.settleDelay
        settle?.cancel()
        let work = DispatchWorkItem { [weak self] in
            guard let self else { return }
            settle = nil
            // A creator that never closes (link(2), mknod) is taken as done by now.
            creatorHoldsIt = false
            deliverNow()
        }
        settle = work
        queue.asyncAfter(deadline: .now() + delay, execute: work)
    }

    private func readEvents() {
        collectEvents()
        deliverCollected()
        // The last holder closed without writing (a reader): the modification settles as usual.
        if settle != nil, settleIsLong, !isHeldOpen { scheduleSettle() }
        // After the delivery: a writer's close is delivered as a change before the look waiting
        // for it runs.
        if !isHeldOpen, !quietWork.isEmpty { runQuietWork() }
    }

    func whenQuiet(_ body: @escaping (String?) -> Void) {
        look(body, waited: false, attempts: 0)
    }

    /// Reads the file for ``whenQuiet(_:)``: after the holders' close (or the deadline), and
    /// again if another program opened or changed the file meanwhile (a writer's open comes
    /// before its truncation, its IN_MODIFY maybe after). Those events are delivered first;
    /// after a few such rounds the look is dropped (each write's close delivers it anyway).
    private func look(_ body: @escaping (String?) -> Void, waited: Bool, attempts: Int) {
        if isHeldOpen, !waited, queue != nil {
            afterQuiet { [weak self] in self?.look(body, waited: true, attempts: attempts) }
            return
        }
        let opens = opensSeen
        let read = readFollowingTheName()
        guard collectEvents() || opensSeen != opens || read.foundUnannounced else {
            body(read.text)
            return
        }
        if read.foundUnannounced, !pendingComplete, !pendingModified { awaitUnannouncedCreator() }
        deliverCollected()
        guard attempts < 3 else { return }
        look(body, waited: false, attempts: attempts + 1)
    }

    /// Runs `work` once no other program holds the file open, or after ``openSettleDelay``.
    private func afterQuiet(_ work: @escaping () -> Void) {
        guard isHeldOpen, let queue else {
            work()
            return
        }
        quietWork.append(work)
        guard quietDeadline == nil else { return }
        let deadline = DispatchWorkItem { [weak self] in self?.runQuietWork() }
        quietDeadline = deadline
        queue.asyncAfter(deadline: .now() + Self.openSettleDelay, execute: deadline)
    }

    private func runQuietWork() {
        quietDeadline?.cancel()
        quietDeadline = nil
        let work = quietWork
        quietWork = []
        for body in work { body() }
    }

    var isBeingWritten: Bool { settle != nil }

    var isIdle: Bool { settle == nil && quietWork.isEmpty }

    func deliverPending() {
        guard inotify >= 0 else { return }
        readEvents()
    }

    /// Whether the inode held has no name left.
    private var isUnlinked: Bool {
        var status = stat()
        return descriptor >= 0 && fstat(descriptor, &status) == 0 && status.st_nlink == 0
    }

    /// Reads what the name holds now: the inode held, after following the name if it moved on
    /// before its event was handled (a `stat` is no inotify event; an open would be one).
    func current() -> String? {
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

    /// ``deliverCollected()`` on the queue's next turn, if the endpoint still exists then.
    func deliverCollectedLater() {
        guard let queue else { return }
        LoopBound(weak: self, on: queue).async { $0.deliverCollected() }
    }

    func stop() {
        settle?.cancel()
        settle = nil
        quietDeadline?.cancel()
        quietDeadline = nil
        quietWork = []
        if inotify >= 0 { releaseFile() }
        if let source {
            let descriptor = inotify
            // The descriptor may be closed only once the source no longer watches it.
            source.setCancelHandler { close(descriptor) }
            source.cancel()
        } else if inotify >= 0 {
            close(inotify)
        }
        source = nil
        inotify = -1
    }
}
