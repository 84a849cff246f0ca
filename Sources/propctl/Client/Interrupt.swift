import DBus
import Dispatch
import Glibc
import SystemKit

/// Waiting for the user to stop a long-running propctl command.
enum Interrupt {
    /// Returns on SIGINT, SIGTERM or SIGHUP, when the bus goes away, or after `timeout` seconds.
    static func wait(_ connection: Connection, timeout: Double? = nil) async {
        /// Made and used on the connection's queue (checked by its ``LoopBound``).
        final class Waiter {
            var sources: [DispatchSourceSignal] = []
            var continuation: CheckedContinuation<Void, Never>?

            init(_ continuation: CheckedContinuation<Void, Never>) {
                self.continuation = continuation
            }

            func end() {
                continuation?.resume()
                continuation = nil
            }
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            connection.queue.async {
                let waiter = LoopBound(Waiter(continuation), on: connection.queue)
                connection.whenDisconnected { waiter.value.end() }
                for number in [SIGINT, SIGTERM, SIGHUP] {
                    // libdispatch on Linux takes the signal itself; the source must outlive the wait.
                    let source = DispatchSource.makeSignalSource(signal: number, queue: connection.queue)
                    source.setEventHandler { waiter.value.end() }
                    source.resume()
                    waiter.value.sources.append(source)
                }
                if let timeout { connection.queue.asyncAfter(deadline: .now() + timeout) { waiter.value.end() } }
            }
        }
    }
}
