import CDBus
import Dispatch
import Glibc

/// Drives one `DBusConnection` from one serial `DispatchQueue`.
///
/// libdbus tells us what to wait for through watch, timeout and dispatch-status callbacks
/// (`dbus_connection_set_watch_functions`, `_set_timeout_functions`,
/// `_set_dispatch_status_function`); watches are waited for by a ``WatchPoller`` and timeouts by
/// dispatch timers, and both are handled on `queue`. Every libdbus call for the connection
/// happens on `queue`.
///
/// `@unchecked Sendable`: all mutable state is touched only on `queue`.
final class MainLoop: @unchecked Sendable {
    let queue: DispatchQueue
    let connection: OpaquePointer
    /// Runs one dispatch round: called on `queue` when messages are waiting, with the dispatch
    /// status when the loop has just read it.
    let dispatchRound: (DBusDispatchStatus?) -> Void
    private var dispatchScheduled = false
    /// True while libdbus handles I/O for us; a dispatch follows then anyway.
    private var handlingIO = false
    /// The watches libdbus gave us, by the id stored as each watch's data.
    private var watches: [Int: OpaquePointer] = [:]
    private var nextWatchID = 1
    private var poller: WatchPoller?
    /// Set when a round left calls waiting for the outgoing queue to drain: the first I/O event
    /// after which fewer bytes than this wait to be sent runs a round.
    private var resumeBelow: Int?

    init(connection: OpaquePointer, queue: DispatchQueue, dispatchRound: @escaping (DBusDispatchStatus?) -> Void) {
        self.connection = connection
        self.queue = queue
        self.dispatchRound = dispatchRound
    }

    /// Installs the callbacks. The loop is retained by libdbus until the connection drops them.
    func install() {
        dispatchPrecondition(condition: .onQueue(queue))
        let data = Unmanaged.passRetained(self).toOpaque()
        let release: DBusFreeFunction = { Unmanaged<MainLoop>.fromOpaque($0!).release() }
        poller = WatchPoller(queue: queue) { [weak self] id, revents in self?.handleReady(id, revents) }
        dbus_connection_set_watch_functions(connection, { watch, data in
            Unmanaged<MainLoop>.fromOpaque(data!).takeUnretainedValue().add(watch: watch!)
        }, { watch, data in
            Unmanaged<MainLoop>.fromOpaque(data!).takeUnretainedValue().remove(watch: watch!)
        }, { _, data in
            Unmanaged<MainLoop>.fromOpaque(data!).takeUnretainedValue().publishWatches()
        }, data, nil)
        dbus_connection_set_timeout_functions(connection, { timeout, data in
            Unmanaged<MainLoop>.fromOpaque(data!).takeUnretainedValue().add(timeout: timeout!)
        }, { timeout, _ in
            TimeoutSource.of(timeout!)?.cancel()
            dbus_timeout_set_data(timeout, nil, nil)
        }, { timeout, _ in
            TimeoutSource.of(timeout!)?.restart()
        }, data, nil)
        // The loop is released once, with the status function's data.
        dbus_connection_set_dispatch_status_function(connection, { _, status, data in
            guard status == DBUS_DISPATCH_DATA_REMAINS else { return }
            // Never dispatch from inside this callback: libdbus holds its lock here.
            Unmanaged<MainLoop>.fromOpaque(data!).takeUnretainedValue().scheduleDispatch()
        }, data, release)
        scheduleDispatch()
    }

    /// Queues a dispatch round unless one is already queued or about to run.
    func scheduleDispatch() {
        guard !dispatchScheduled, !handlingIO else { return }
        dispatchScheduled = true
        queue.async { [self] in
            dispatchScheduled = false
            dispatchRound(nil)
        }
    }

    /// Runs a round after the I/O event that brings the outgoing queue below `bytes` (the
    /// connection held its calls back while more was waiting to be sent).
    func resumeWhenOutput(below bytes: Int) {
        resumeBelow = bytes
    }

    /// Stops waiting for I/O; called when the connection goes away.
    func stop() {
        poller?.stop()
        poller = nil
    }

    private func add(watch: OpaquePointer) -> dbus_bool_t {
        let id = nextWatchID
        nextWatchID += 1
        watches[id] = watch
        // The id itself is the watch's data: nothing to allocate or free.
        dbus_watch_set_data(watch, UnsafeMutableRawPointer(bitPattern: id), nil)
        publishWatches()
        return 1
    }

    private func remove(watch: OpaquePointer) {
        guard let data = dbus_watch_get_data(watch) else { return }
        watches[Int(bitPattern: data)] = nil
        dbus_watch_set_data(watch, nil, nil)
        publishWatches()
    }

    /// Hands the enabled watches to the poller; libdbus toggles them as its buffers fill.
    private func publishWatches() {
        var entries: [WatchPoller.Entry] = []
        for (id, watch) in watches where dbus_watch_get_enabled(watch) != 0 {
            let flags = dbus_watch_get_flags(watch)
            // A watch may ask for both directions at once: test the bits.
            var events: Int16 = 0
            if flags & DBUS_WATCH_READABLE.rawValue != 0 { events |= Int16(POLLIN) }
            if flags & DBUS_WATCH_WRITABLE.rawValue != 0 { events |= Int16(POLLOUT) }
            entries.append(.init(id: id, fd: dbus_watch_get_unix_fd(watch), events: events))
        }
        poller?.update(entries)
    }

    private func handleReady(_ id: Int, _ revents: Int16) {
        // The watch may have gone or been disabled since the poll thread looked.
        guard let watch = watches[id], dbus_watch_get_enabled(watch) != 0 else { return }
        var flags: UInt32 = 0
        if revents & Int16(POLLIN) != 0 { flags |= DBUS_WATCH_READABLE.rawValue }
        if revents & Int16(POLLOUT) != 0 { flags |= DBUS_WATCH_WRITABLE.rawValue }
        if revents & Int16(POLLHUP) != 0 { flags |= DBUS_WATCH_HANGUP.rawValue }
        if revents & Int16(POLLERR) != 0 { flags |= DBUS_WATCH_ERROR.rawValue }
        handleIO { _ = dbus_watch_handle(watch, flags) }
    }

    private func add(timeout: OpaquePointer) -> dbus_bool_t {
        let source = TimeoutSource(timeout: timeout, loop: self)
        dbus_timeout_set_data(timeout, Unmanaged.passRetained(source).toOpaque(), { Unmanaged<TimeoutSource>.fromOpaque($0!).release() })
        source.restart()
        return 1
    }

    /// Called after libdbus handled I/O, on `queue` and outside any libdbus callback, so ready
    /// messages are dispatched at once rather than after another hop through the queue.
    fileprivate func handleIO(_ body: () -> Void) {
        handlingIO = true
        body()
        handlingIO = false
        afterHandling()
    }

    private func afterHandling() {
        if dbus_connection_get_dispatch_status(connection) == DBUS_DISPATCH_DATA_REMAINS {
            resumeBelow = nil
            dispatchRound(DBUS_DISPATCH_DATA_REMAINS)
        } else if let limit = resumeBelow, Int(dbus_connection_get_outgoing_size(connection)) < limit {
            resumeBelow = nil
            dispatchRound(nil)
        }
    }
}

/// The timer for one `DBusTimeout`; restarted whenever libdbus toggles it.
private final class TimeoutSource: @unchecked Sendable { // confined to the loop's queue
    let timeout: OpaquePointer
    let loop: MainLoop
    var timer: DispatchSourceTimer?

    init(timeout: OpaquePointer, loop: MainLoop) {
        self.timeout = timeout
        self.loop = loop
    }

    static func of(_ timeout: OpaquePointer) -> TimeoutSource? {
        dbus_timeout_get_data(timeout).map { Unmanaged<TimeoutSource>.fromOpaque($0).takeUnretainedValue() }
    }

    func restart() {
        cancel()
        guard dbus_timeout_get_enabled(timeout) != 0 else { return }
        let interval = DispatchTimeInterval.milliseconds(Int(dbus_timeout_get_interval(timeout)))
        let timer = DispatchSource.makeTimerSource(queue: loop.queue)
        timer.schedule(deadline: .now() + interval, repeating: interval)
        timer.setEventHandler { [weak self] in
            guard let self else { return }
            loop.handleIO { _ = dbus_timeout_handle(timeout) }
        }
        timer.resume()
        self.timer = timer
    }

    func cancel() {
        timer?.cancel()
        timer = nil
    }
}
