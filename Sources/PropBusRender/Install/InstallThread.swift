import Synchronization
import SystemKit

/// Where the renders' file work runs (open, write, `fsync`, rename, `fsync` of a directory):
/// one thread of its own, in order, so a slow disk holds neither the daemon's queue nor a
/// thread of Dispatch's pool (which grows about a thread a second on Linux). The thread runs
/// while there is work and ends when there is none; the next work starts another.
final class InstallThread: Sendable {
    private struct State {
        var work: [@Sendable () -> Void] = []
        var running = false
    }

    private let state = Mutex(State())

    /// Runs `body` after the work given before it, on the install thread.
    func async(_ body: @escaping @Sendable () -> Void) {
        let start = state.withLock { state -> Bool in
            state.work.append(body)
            guard !state.running else { return false }
            state.running = true
            return true
        }
        guard start else { return }
        if !DetachedThread.start({ [self] in run() }) {
            // No thread to be had: the work still has to happen, here.
            run()
        }
    }

    private func run() {
        while true {
            let next = state.withLock { state -> (@Sendable () -> Void)? in
                guard !state.work.isEmpty else {
                    state.running = false
                    return nil
                }
                return state.work.removeFirst()
            }
            guard let next else { return }
            next()
        }
    }
}
