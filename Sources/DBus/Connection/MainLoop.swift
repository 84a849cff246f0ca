import CDBus
import Dispatch

/// Drives one `DBusConnection` from one serial `DispatchQueue`.
///
/// libdbus tells us what to wait for through watch, timeout and dispatch-status callbacks
/// (`dbus_connection_set_watch_functions`, `_set_timeout_functions`,
/// `_set_dispatch_status_function`); this turns them into dispatch sources on `queue`. Every
/// libdbus call for the connection happens on `queue`.
///
/// `@unchecked Sendable`: all mutable state is touched only on `queue`.
final class MainLoop: @unchecked Sendable {
    let queue: DispatchQueue
    let connection: OpaquePointer
    /// Runs one dispatch round: called on `queue` when messages are waiting.
    let dispatchRound: () -> Void
    private var dispatchScheduled = false
    /// True while libdbus handles I/O for us; a dispatch follows then anyway.
    private var handlingIO = false

    init(connection: OpaquePointer, queue: DispatchQueue, dispatchRound: @escaping () -> Void) {
        self.connection = connection
        self.queue = queue
        self.dispatchRound = dispatchRound
    }

    /// Installs the callbacks. The loop is retained by libdbus until the connection drops them.
    func install() {
        dispatchPrecondition(condition: .onQueue(queue))
        let data = Unmanaged.passRetained(self).toOpaque()
        let release: DBusFreeFunction = { Unmanaged<MainLoop>.fromOpaque($0!).release() }
        dbus_connection_set_watch_functions(connection, { watch, data in
            Unmanaged<MainLoop>.fromOpaque(data!).takeUnretainedValue().add(watch: watch!)
        }, { watch, _ in
            WatchSources.of(watch!)?.cancel()
            dbus_watch_set_data(watch, nil, nil)
        }, { watch, _ in
            WatchSources.of(watch!)?.updateEnabled()
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
            dispatchRound()
        }
    }

    private func add(watch: OpaquePointer) -> dbus_bool_t {
        let sources = WatchSources(watch: watch, loop: self)
        dbus_watch_set_data(watch, Unmanaged.passRetained(sources).toOpaque(), { Unmanaged<WatchSources>.fromOpaque($0!).release() })
        sources.updateEnabled()
        return 1
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
            dispatchRound()
        }
    }
}

/// The read and write dispatch sources for one `DBusWatch`.
///
/// libdispatch traps when a suspended source is released, so every source is resumed before it
/// is cancelled, and cancelled before it is dropped.
private final class WatchSources: @unchecked Sendable { // confined to the loop's queue
    let watch: OpaquePointer
    let loop: MainLoop
    var read: DispatchSourceRead?
    var write: DispatchSourceWrite?
    var running = false

    init(watch: OpaquePointer, loop: MainLoop) {
        self.watch = watch
        self.loop = loop
        let fd = dbus_watch_get_unix_fd(watch)
        let flags = dbus_watch_get_flags(watch)
        // A watch may ask for both directions at once: test the bits.
        if flags & DBUS_WATCH_READABLE.rawValue != 0 {
            let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: loop.queue)
            source.setEventHandler { [weak self] in self?.handle(DBUS_WATCH_READABLE.rawValue) }
            read = source
        }
        if flags & DBUS_WATCH_WRITABLE.rawValue != 0 {
            let source = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: loop.queue)
            source.setEventHandler { [weak self] in self?.handle(DBUS_WATCH_WRITABLE.rawValue) }
            write = source
        }
    }

    static func of(_ watch: OpaquePointer) -> WatchSources? {
        dbus_watch_get_data(watch).map { Unmanaged<WatchSources>.fromOpaque($0).takeUnretainedValue() }
    }

    private func handle(_ flag: UInt32) {
        // The watch may have been disabled by an earlier event in this turn.
        guard running else { return }
        loop.handleIO { _ = dbus_watch_handle(watch, flag) }
    }

    func updateEnabled() {
        let enabled = dbus_watch_get_enabled(watch) != 0
        guard enabled != running else { return }
        running = enabled
        if enabled {
            read?.resume()
            write?.resume()
        } else {
            read?.suspend()
            write?.suspend()
        }
    }

    func cancel() {
        if !running {
            read?.resume()
            write?.resume()
            running = true
        }
        read?.cancel()
        write?.cancel()
        read = nil
        write = nil
        running = false
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
