import Glibc

/// A POSIX thread that runs one closure and is never joined (`pthread_create`, then
/// `pthread_detach`): for blocking loops, such as reading a pipe, that must not hold a thread
/// of Dispatch's or Swift concurrency's pools.
public enum DetachedThread {
    /// Starts `body` on a new thread; false if the thread could not be created.
    @discardableResult
    public static func start(_ body: @escaping @Sendable () -> Void) -> Bool {
        let box = Unmanaged.passRetained(Box(body)).toOpaque()
        var thread = pthread_t()
        let result = pthread_create(&thread, nil, { argument in
            let box = Unmanaged<Box>.fromOpaque(argument!).takeRetainedValue()
            box.body()
            return nil
        }, box)
        guard result == 0 else {
            Unmanaged<Box>.fromOpaque(box).release()
            return false
        }
        pthread_detach(thread)
        return true
    }

    private final class Box {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
}
