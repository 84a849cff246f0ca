import DBus
import Foundation

/// A private `dbus-daemon` for in-process tests (the DBus library's, the service's):
/// everything allowed, in a temporary directory; nothing of propbus. The machine's buses are
/// never touched.
public final class TestBus: @unchecked Sendable {
    /// The bus's address, as `dbus-daemon --print-address` gave it.
    public let address: String
    private let process: Process
    private let directory: URL

    private init(address: String, process: Process, directory: URL) {
        self.address = address
        self.process = process
        self.directory = directory
    }

    /// Starts a bus; `maxMessageSize` sets the bus's `max_message_size` limit when given.
    public static func start(maxMessageSize: Int? = nil) throws -> TestBus {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pbdbus-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let config = directory.appendingPathComponent("bus.conf")
        let limit = maxMessageSize.map { "<limit name=\"max_message_size\">\($0)</limit>" } ?? ""
        try """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>session</type>
          <listen>unix:path=\(directory.appendingPathComponent("bus").path)</listen>
          <auth>EXTERNAL</auth>
          <policy context="default">
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
            <allow own="*"/>
          </policy>
          <limit name="max_replies_per_connection">50000</limit>
          \(limit)
        </busconfig>
        """.write(to: config, atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/dbus-daemon")
        process.arguments = ["--config-file=\(config.path)", "--nofork", "--print-address"]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        // The first line is the address; read byte by byte so nothing after it is consumed.
        var line = Data()
        while let byte = try output.fileHandleForReading.read(upToCount: 1), let first = byte.first, first != 10 {
            line.append(first)
        }
        guard let address = String(data: line, encoding: .utf8), !address.isEmpty else {
            process.terminate()
            throw DBusError.failed("dbus-daemon printed no address")
        }
        return TestBus(address: address, process: process, directory: directory)
    }

    /// A new connection to this bus, registered (Hello done).
    public func connect() async throws -> Connection {
        try await Connection.connect(to: .address(address))
    }

    /// Kills the bus and removes its directory.
    public func stop() {
        // SIGKILL: the child may inherit a mask that blocks SIGTERM from the test runner.
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        try? FileManager.default.removeItem(at: directory)
    }
}

/// Polls `condition` until it holds or `timeout` seconds pass.
public func eventually(timeout: TimeInterval = 5, _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    repeat {
        if try await condition() { return true }
        try? await Task.sleep(nanoseconds: 5_000_000)
    } while Date() < deadline
    return try await condition()
}

/// Runs `body` on the connection's queue and returns its result.
public func onQueue<T: Sendable>(_ connection: Connection, _ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in connection.queue.async { continuation.resume(returning: body()) } }
}

/// Runs `body` on the connection's queue and returns its result or rethrows its error.
public func onQueue<T: Sendable>(_ connection: Connection, _ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        connection.queue.async { continuation.resume(with: Result { try body() }) }
    }
}
