import Dispatch
import Synchronization
import SystemKit

/// Where the renders' file work runs (open, write, `fsync`, rename, `fsync` of a directory):
/// one thread of its own, in order, so a slow disk holds neither the daemon's queue nor a
/// thread of Dispatch's pool (which grows about a thread a second on Linux). The thread waits
/// a second for more work, then ends; the next work starts another.
final class InstallThread: Sendable {
    private struct State {
        var work: [@Sendable () -> Void] = []
        var running = false
    }

    private let state = Mutex(State())
    /// Signalled for each work given; the thread waits on it when it has none.
    private let more = DispatchSemaphore(value: 0)

    /// Runs `body` after the work given before it, on the install thread.
    func async(_ body: @escaping @Sendable () -> Void) {
        let start = state.withLock { state -> Bool in
            state.work.append(body)
            guard !state.running else { return false }
            state.running = true
            return true
        }
        guard start else {
            more.signal()
            return
        }
        if !DetachedThread.start({ [self] in run(lingering: true) }) {
            // No thread to be had: the work still has to happen, here, and at once.
            run(lingering: false)
        }
    }

    /// Runs the work given until there is none, then (`lingering`) waits a second for more.
    private func run(lingering: Bool) {
        var waited = !lingering
        while true {
            let next = state.withLock { state -> (@Sendable () -> Void)? in
                guard !state.work.isEmpty else {
                    // Ends only under the lock, where new work sees it has to start a thread.
                    if waited { state.running = false }
                    return nil
                }
                return state.work.removeFirst()
            }
            if let next {
                waited = !lingering
                next()
                continue
            }
            if waited { return }
            // A signal left from work this loop already took wakes it once, for nothing.
            waited = more.wait(timeout: .now() + 1) == .timedOut
        }
    }
}
