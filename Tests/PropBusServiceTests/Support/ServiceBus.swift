import DBus
import Foundation

/// A private `dbus-daemon` for in-process tests of the service: everything allowed, in a
/// temporary directory. The machine's buses are never touched.
final class ServiceBus: @unchecked Sendable {
    let address: String
    private let process: Process
    private let directory: URL

    private init(address: String, process: Process, directory: URL) {
        self.address = address
        self.process = process
        self.directory = directory
    }

    static func start() throws -> ServiceBus {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pbsvc-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let config = directory.appendingPathComponent("bus.conf")
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
        return ServiceBus(address: address, process: process, directory: directory)
    }

    /// A new connection to this bus (Hello done).
    func connect() async throws -> Connection {
        try await Connection.connect(to: .address(address))
    }

    func stop() {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        try? FileManager.default.removeItem(at: directory)
    }
}

/// Runs `body` on the connection's queue and returns its result.
func onQueue<T: Sendable>(_ connection: Connection, _ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        connection.queue.async { continuation.resume(with: Result { try body() }) }
    }
}
