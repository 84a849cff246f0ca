import Glibc

/// A value behind a mutex, for the few reads that must be answered synchronously from any
/// thread (a property's ``Property/current`` and ``Property/state``).
final class Locked<Value>: @unchecked Sendable {
    // Safety: `value` is only touched with the mutex held, and the mutex lives in its own
    // allocation so it never moves.
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func withLock<R>(_ body: (inout Value) -> R) -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return body(&value)
    }
}
