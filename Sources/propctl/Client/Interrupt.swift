import DBus
import Dispatch
import Glibc

/// Waiting for the user to stop a long-running propctl command.
enum Interrupt {
    /// Returns on SIGINT, SIGTERM or SIGHUP, when the bus goes away, or after `timeout` seconds.
    static func wait(_ connection: Connection, timeout: Double? = nil) async {
        /// `@unchecked Sendable`: only touched on the connection's queue.
        final class Waiter: @unchecked Sendable {
            var sources: [DispatchSourceSignal] = []
            var continuation: CheckedContinuation<Void, Never>?

            func end() {
                continuation?.resume()
                continuation = nil
            }
        }
        let waiter = Waiter()
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            connection.queue.async {
                waiter.continuation = continuation
                connection.whenDisconnected { waiter.end() }
                for number in [SIGINT, SIGTERM, SIGHUP] {
                    // libdispatch on Linux takes the signal itself; the source must outlive the wait.
                    let source = DispatchSource.makeSignalSource(signal: number, queue: connection.queue)
                    source.setEventHandler { waiter.end() }
                    source.resume()
                    waiter.sources.append(source)
                }
                if let timeout { connection.queue.asyncAfter(deadline: .now() + timeout) { waiter.end() } }
            }
        }
    }
}
