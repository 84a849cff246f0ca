import CommandLineKit
import DBus
import Dispatch
import Glibc
import SystemKit

/// What `propctl override` and `propctl create --lifetime connection` do once the daemon holds
/// something for this connection: keep the connection while a command runs (or until
/// interrupted, or for a duration), then let go.
enum LeaseHolding {
    /// Reads a DURATION: seconds (`90`, `1.5`) or with a unit (`30s`, `5m`, `2h`, `1d`).
    static func seconds(_ text: String, option: String) throws(CommandFailure) -> Double {
        let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86400]
        var number = Substring(text), scale = 1.0
        if let last = text.last, let unit = units[last] {
            number = number.dropLast()
            scale = unit
        }
        guard let value = Double(number), value.isFinite, value > 0 else {
            throw CommandFailure(.usage, "\(option) expects a duration such as 90, 30s, 5m, 2h or 1d, got '\(text)'")
        }
        return value * scale
    }

    /// The outcome of holding: how propctl exits.
    enum Outcome {
        /// Interrupted (SIGINT, SIGTERM, SIGHUP), the duration over, or the bus gone.
        case ended
        /// The command exited with this status (128 + N when killed by signal N, as shells say).
        case commandExited(Int32)
    }

    /// Runs `command` (stdio passed through) until it exits, or without one waits for a signal
    /// or `duration` seconds; SIGINT and SIGTERM go on to the command, which decides when it ends.
    static func hold(_ connection: Connection, running command: [String], for duration: Double?) async throws(CommandFailure) -> Outcome {
        guard !command.isEmpty else {
            await Interrupt.wait(connection, timeout: duration)
            return .ended
        }
        let pid: pid_t
        switch Subprocess.spawn(command, redirections: [], defaultSignals: [SIGPIPE, SIGINT, SIGTERM, SIGHUP], emptySignalMask: true) {
        case .success(let started): pid = started
        case .failure(let error): throw CommandFailure(.dbusError, "cannot run \(command[0]): \(error)")
        }
        // Forwarded, not acted on: the command's own exit ends the hold.
        let forwarding = [SIGINT, SIGTERM, SIGHUP].map { number in
            let source = DispatchSource.makeSignalSource(signal: number, queue: connection.queue)
            source.setEventHandler { kill(pid, number) }
            source.resume()
            return source
        }
        defer { forwarding.forEach { $0.cancel() } }
        let status: Int32 = await withCheckedContinuation { continuation in
            // Its own thread, blocked in waitpid: never one of libdispatch's pool.
            let started = DetachedThread.start {
                var raw: Int32 = 0
                while waitpid(pid, &raw, 0) < 0, errno == EINTR {}
                let exited = raw & 0x7f == 0
                continuation.resume(returning: exited ? (raw >> 8) & 0xff : 128 + (raw & 0x7f))
            }
            if !started { continuation.resume(returning: 127) }
        }
        return .commandExited(status)
    }
}
