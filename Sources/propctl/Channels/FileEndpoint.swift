import Dispatch
import Glibc
import SystemKit

/// A file whose content, without its trailing newline, is the local value.
///
/// What inotify says of the file is ``WatchedFile``'s; this endpoint decides when a change is a
/// value. A half-written file is never a value: a modification waits for its writer's close (the
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
    let file: WatchedFile
    let inPlace: Bool
    private var source: DispatchSourceRead?
    private var queue: DispatchQueue?
    private var changed: ((String?) -> Void)?
    var settle: DispatchWorkItem?
    /// Whether ``settle`` waits the long delay, for a program holding the file open.
    private var settleIsLong = false
    /// Looks at the file waiting for the file's holders to close it (``afterQuiet(_:)``), and
    /// the deadline after which they run anyway.
    private var quietWork: [() -> Void] = []
    private var quietDeadline: DispatchWorkItem?
    /// Changes delivered so far (see ``deliverNow(opensBefore:)``).
    private var deliveries = 0
    /// The content as of the last change the channel was told about, or the last write.
    ///
    /// Not used to decide whether a value propagates (that is always a comparison with current
    /// values): only to notice a change whose inotify event is not there yet, since a write
    /// becomes visible before its event does (and sysfs files send none). A bus value is not
    /// written over such a change; the change is delivered first.
    var notified: String?

    /// How long a modification without a close must stay quiet before the file is read: a
    /// writer between its truncation and its write must not be read half-way.
    static let settleDelay: DispatchTimeInterval = .milliseconds(30)
    /// How long a modification waits for the close of a file someone holds open (a reader that
    /// keeps it open must not hold a bare truncation back for good).
    static let openSettleDelay: DispatchTimeInterval = .seconds(1)

    init(path: String, inPlace: Bool) {
        file = WatchedFile(path: path)
        self.inPlace = inPlace
    }

    /// The file's absolute path.
    var path: String { file.path }

    var label: String { "file \(path)" }

    func start(on queue: DispatchQueue, changed: @escaping (String?) -> Void,
               ended: @escaping (CommandFailure?) -> Void) throws(CommandFailure) {
        dispatchPrecondition(condition: .onQueue(queue))
        self.queue = queue
        self.changed = changed
        let inotify = try file.open(on: queue)
        notified = current()
        let source = DispatchSource.makeReadSource(fileDescriptor: inotify, queue: queue)
        source.setEventHandler { [weak self] in self?.readEvents() }
        source.resume()
        self.source = source
    }

    /// Collects the queued inotify events (``WatchedFile/collectEvents()``); whether there was any.
    @discardableResult
    func collectEvents() -> Bool { file.collectEvents() }

    /// A finished write or a rename onto the name is a change now; a modification (even after
    /// a finished change) is one once its writer closes the file or it settles.
    private func deliverCollected() {
        if file.pendingModified {
            file.pendingModified = false
            file.pendingComplete = false
            scheduleSettle()
        } else if file.pendingComplete {
            deliverNow(opensBefore: file.opensAtFinish)
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
            let opens = opensBefore ?? file.opensSeen
            opensBefore = nil
            file.pendingComplete = false
            let read = file.readFollowingTheName()
            text = read.text
            if read.foundUnannounced { unannounced = true }
            collectEvents()
            if file.pendingModified {
                file.pendingModified = false
                file.pendingComplete = false
                scheduleSettle()
                return
            }
            if file.opensSeen != opens {
                guard file.isHeldOpen else { continue }
                let delivered = deliveries
                afterQuiet { [weak self] in
                    guard let self, deliveries == delivered else { return }
                    deliverNow()
                }
                return
            }
            if !file.pendingComplete {
                if unannounced {
                    awaitUnannouncedCreator()
                    return
                }
                break
            }
            // Another finished change (a second rename): read again.
        }
        file.pendingComplete = false
        settle?.cancel()
        settle = nil
        notified = text
        deliveries += 1
        changed?(text)
    }

    /// What was read of an unannounced inode is no value yet: wait as for a creation, until the
    /// creator's close, the name's rename event or ``openSettleDelay``.
    private func awaitUnannouncedCreator() {
        file.creatorHoldsIt = true
        scheduleSettle()
    }

    /// Delivers a change once the file has been quiet for ``settleDelay``, or for
    /// ``openSettleDelay`` while another program holds it open: that writer's close comes first,
    /// even when the change was seen before its IN_MODIFY (by ``write(_:)``).
    func scheduleSettle() {
        guard let queue else { return }
        settleIsLong = file.isHeldOpen
        let delay = settleIsLong ? Self.openSettleDelay : Self.settleDelay
        settle?.cancel()
        let work = DispatchWorkItem { [weak self] in
            guard let self else { return }
            settle = nil
            // A creator that never closes (link(2), mknod) is taken as done by now.
            file.creatorHoldsIt = false
            deliverNow()
        }
        settle = work
        queue.asyncAfter(deadline: .now() + delay, execute: work)
    }

    private func readEvents() {
        collectEvents()
        deliverCollected()
        // The last holder closed without writing (a reader): the modification settles as usual.
        if settle != nil, settleIsLong, !file.isHeldOpen { scheduleSettle() }
        // After the delivery: a writer's close is delivered as a change before the look waiting
        // for it runs.
        if !file.isHeldOpen, !quietWork.isEmpty { runQuietWork() }
    }

    func whenQuiet(_ body: @escaping (String?) -> Void) {
        look(body, waited: false, attempts: 0)
    }

    /// Reads the file for ``whenQuiet(_:)``: after the holders' close (or the deadline), and
    /// again if another program opened or changed the file meanwhile (a writer's open comes
    /// before its truncation, its IN_MODIFY maybe after). Those events are delivered first;
    /// after a few such rounds the look is dropped (each write's close delivers it anyway).
    private func look(_ body: @escaping (String?) -> Void, waited: Bool, attempts: Int) {
        if file.isHeldOpen, !waited, queue != nil {
            afterQuiet { [weak self] in self?.look(body, waited: true, attempts: attempts) }
            return
        }
        let opens = file.opensSeen
        let read = file.readFollowingTheName()
        guard collectEvents() || file.opensSeen != opens || read.foundUnannounced else {
            body(read.text)
            return
        }
        if read.foundUnannounced, !file.pendingComplete, !file.pendingModified { awaitUnannouncedCreator() }
        deliverCollected()
        guard attempts < 3 else { return }
        look(body, waited: false, attempts: attempts + 1)
    }

    /// Runs `work` once no other program holds the file open, or after ``openSettleDelay``.
    private func afterQuiet(_ work: @escaping () -> Void) {
        guard file.isHeldOpen, let queue else {
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
        guard file.inotify >= 0 else { return }
        readEvents()
    }

    /// Reads what the name holds now (``WatchedFile/read()``).
    func current() -> String? { file.read() }

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
        let inotify = file.close()
        if let source {
            // The descriptor may be closed only once the source no longer watches it.
            source.setCancelHandler { if inotify >= 0 { close(inotify) } }
            source.cancel()
        } else if inotify >= 0 {
            close(inotify)
        }
        source = nil
    }
}
