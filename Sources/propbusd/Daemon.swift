import DBus
import Dispatch
import Foundation
import PropBus
import PropBusService

/// The daemon's lifecycle: connect, export, own the name, and shut down on a signal.
///
/// `@unchecked Sendable`: `service` and `connection` are written once during start-up on the
/// connection's queue and read afterwards only there.
final class Daemon: @unchecked Sendable {
    let options: DaemonOptions
    let queue = DispatchQueue(label: "org.propbus.propbusd")
    private var connection: Connection?
    private var service: Service?
    private var signalSources: [DispatchSourceSignal] = []

    init(options: DaemonOptions) { self.options = options }

    /// Starts serving; on failure prints why and exits.
    func start() async {
        do {
            let connection = try await Connection.connect(to: options.bus, queue: queue)
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                queue.async { [self] in
                    do {
                        let store = MemoryStore()
                        let model = try PropertyModel(store: store, limits: options.limits)
                        // Export everything before owning the name: no client may see a half-built daemon.
                        service = Service(connection: connection, model: model, store: store)
                        self.connection = connection
                        connection.onDisconnect = {
                            Self.fail("lost the connection to the bus", code: 1)
                        }
                        continuation.resume()
                    } catch {
                        continuation.resume(throwing: error)
                    }
                }
            }
            let reply = try await connection.requestName(Service.busName)
            guard reply == .primaryOwner || reply == .alreadyOwner else {
                Self.fail("the name \(Service.busName) is already owned on this bus", code: 1)
            }
            installSignalHandlers()
            SystemdNotifier.notify("READY=1\nSTATUS=Serving \(Service.busName)")
        } catch let error as DBusError {
            Self.fail("cannot start: \(error.name): \(error.message)", code: 1)
        } catch {
            Self.fail("cannot start: \(error)", code: 1)
        }
    }

    private func installSignalHandlers() {
        for number in [SIGTERM, SIGINT] {
            // libdispatch on Linux takes the signal itself; the source must live as long as we do.
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { [self] in stop() }
            source.resume()
            signalSources.append(source)
        }
    }

    /// SIGTERM/SIGINT: tell systemd, release the name, flush, exit 0.
    private func stop() {
        SystemdNotifier.notify("STOPPING=1")
        guard let connection else { exit(0) }
        Task {
            try? await connection.releaseName(Service.busName)
            connection.flush()
            exit(0)
        }
    }

    static func fail(_ message: String, code: Int32) -> Never {
        FileHandle.standardError.write(Data("propbusd: \(message)\n".utf8))
        exit(code)
    }
}
