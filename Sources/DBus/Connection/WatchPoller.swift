import Dispatch
import Glibc
import Synchronization

/// Waits for a connection's file descriptors on a thread of its own.
///
/// A ready descriptor is handled with `queue.sync`, which libdispatch runs inline on the calling
/// thread when the serial queue is idle. Compared with dispatch sources, which are woken on
/// libdispatch's event thread and then hop to a worker, this saves two thread switches per
/// message; everything still runs *on* `queue`, so ownership rules are unchanged.
///
/// `@unchecked Sendable`: the descriptor set is shared with the poll thread only through the
/// `Mutex`; the wake pipe's descriptors are written once in `init`.
final class WatchPoller: @unchecked Sendable {
    /// One descriptor to wait for: `id` is the caller's handle for the watch.
    struct Entry: Sendable {
        var id: Int
        var fd: Int32
        var events: Int16
    }

    private struct State {
        var entries: [Entry] = []
        var running = true
        /// Bumped by every change of `entries`, so the poll loop rebuilds its set only then.
        var version = 0
    }

    private let state = Mutex(State())
    /// A pipe that interrupts `poll` when the set changes or the poller stops.
    private let wakeRead: Int32
    private let wakeWrite: Int32
    private let queue: DispatchQueue
    /// Called on `queue` with a ready entry's id and `revents`.
    private let ready: @Sendable (Int, Int16) -> Void

    init(queue: DispatchQueue, ready: @escaping @Sendable (Int, Int16) -> Void) {
        self.queue = queue
        self.ready = ready
        var pipeFDs: [Int32] = [-1, -1]
        _ = pipe(&pipeFDs)
        for fd in pipeFDs {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, O_NONBLOCK)
        }
        wakeRead = pipeFDs[0]
        wakeWrite = pipeFDs[1]
        // A plain pthread (not Foundation's Thread): the poll loop needs nothing more, and the
        // daemon stays free of Foundation's weight. The thread holds the poller until it ends.
        var thread = pthread_t()
        let box = Unmanaged.passRetained(self).toOpaque()
        pthread_create(&thread, nil, { raw in
            let poller = Unmanaged<WatchPoller>.fromOpaque(raw!).takeRetainedValue()
            poller.run()
            return nil
        }, box)
        pthread_detach(thread)
    }

    /// Replaces the set of descriptors to wait for.
    func update(_ entries: [Entry]) {
        state.withLock {
            $0.entries = entries
            $0.version += 1
        }
        wake()
    }

    /// Ends the poll thread; the poller is released when it has exited.
    func stop() {
        state.withLock { $0.running = false }
        wake()
    }

    private func wake() {
        var one: UInt8 = 1
        _ = write(wakeWrite, &one, 1)
    }

    private func run() {
        defer {
            close(wakeRead)
            close(wakeWrite)
        }
        // The set is rebuilt only when it changed: once per message would be two allocations
        // and a copy on the Get round trip's path.
        var entries: [Entry] = []
        var fds: [pollfd] = []
        var version = -1
        var drained = [UInt8](repeating: 0, count: 64)
        while true {
            let (current, running) = state.withLock { state -> (Int, Bool) in
                if state.version != version { entries = state.entries }
                return (state.version, state.running)
            }
            guard running else { return }
            if current != version {
                version = current
                fds = [pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)]
                fds += entries.map { pollfd(fd: $0.fd, events: $0.events, revents: 0) }
            }
            for index in fds.indices { fds[index].revents = 0 }
            let count = poll(&fds, nfds_t(fds.count), -1)
            if count < 0 {
                if errno == EINTR { continue }
                return
            }
            if fds[0].revents != 0 {
                while read(wakeRead, &drained, 64) > 0 {}
            }
            for (index, entry) in entries.enumerated() where fds[index + 1].revents != 0 {
                let revents = fds[index + 1].revents
                queue.sync { ready(entry.id, revents) }
            }
        }
    }
}
