import Glibc

/// The signals propbusd answers (SIGTERM and SIGINT stop it, SIGHUP reloads the model files),
/// blocked in every thread for the life of the process and taken by dispatch sources only.
///
/// libdispatch registers a signal source, and installs its own handler for the signal, on its
/// manager thread some time after `resume()`; until then a signal that reaches a thread which
/// does not block it takes its default action, and the daemon dies of it instead of shutting
/// down (a SIGTERM early in the start-up, or one right after the name is owned while a loaded
/// machine has not yet run the manager thread). Blocked before any other thread exists, the
/// signals are blocked in every thread (each inherits its creator's mask) and one that comes
/// early stays pending until a source's signalfd, which takes blocked signals, reads it.
enum HandledSignals {
    /// SIGTERM, SIGINT and SIGHUP.
    static let numbers: [Int32] = [SIGTERM, SIGINT, SIGHUP]

    /// Blocks ``numbers`` in the calling thread. First thing in main: threads started before
    /// would keep the default action.
    static func blockBeforeAnyThreadStarts() {
        var set = sigset_t()
        sigemptyset(&set)
        for number in numbers { sigaddset(&set, number) }
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// Parks the main thread for good, with ``numbers`` still blocked. Not `dispatchMain()`: on
    /// Linux it waits in `sigsuspend` with no signal blocked, so an early SIGTERM would reach
    /// the main thread and kill the process. Nothing of the daemon runs on the main queue.
    static func parkMainThread() -> Never {
        while true { pause() }
    }
}
