import Foundation

/// A private session-type `dbus-daemon` whose `<servicedir>` holds the project's session
/// activation file, so the first call to `org.propbus.PropBus1` starts `propbusd` the way a
/// desktop session would (without systemd, the bus runs `Exec=` itself).
///
/// Separate from ``PrivateBus`` on purpose: that bus must never start anything by itself.
final class ActivationBus: @unchecked Sendable {
    let address: String
    let directory: URL
    let process: ChildProcess

    private init(address: String, directory: URL, process: ChildProcess) {
        self.address = address
        self.directory = directory
        self.process = process
    }

    /// The repository's `systemd/` directory.
    static let systemdDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("systemd")

    /// Starts a bus with `systemd/org.propbus.PropBus1.session.service` installed, its `Exec=`
    /// rewritten from `/usr/bin/propbusd` to the built binary. The bus's environment (which
    /// activated services inherit) keeps state and config in the bus's directory.
    static func start() async throws -> ActivationBus {
        let directory = try makeTemporaryDirectory(prefix: "pbit-act")
        let services = directory.appendingPathComponent("services")
        try FileManager.default.createDirectory(at: services, withIntermediateDirectories: true)
        let source = try String(contentsOf: systemdDirectory.appendingPathComponent("org.propbus.PropBus1.session.service"), encoding: .utf8)
        guard source.contains("Exec=/usr/bin/propbusd ") else {
            throw TestSetupError("the session activation file has no Exec=/usr/bin/propbusd line:\n\(source)")
        }
        try source.replacingOccurrences(of: "Exec=/usr/bin/propbusd ", with: "Exec=\(BuildProducts.propbusd) ")
            .write(to: services.appendingPathComponent("org.propbus.PropBus1.service"), atomically: true, encoding: .utf8)

        let socketPath = directory.appendingPathComponent("bus").path
        let configuration = PrivateBus.configuration(socketPath: socketPath, limits: ["service_start_timeout": 20000],
                                                     serviceDirectory: services.path)
        let configURL = directory.appendingPathComponent("bus.conf")
        try configuration.write(to: configURL, atomically: true, encoding: .utf8)
        var environment = PrivateBus.isolatedEnvironment(address: nil)
        environment["XDG_STATE_HOME"] = directory.appendingPathComponent("xdg-state").path
        environment["XDG_CONFIG_HOME"] = directory.appendingPathComponent("xdg-config").path
        environment["HOME"] = directory.path
        let (process, address) = try await PrivateBus.launch(configURL, environment: environment, directory: directory)
        return ActivationBus(address: address, directory: directory, process: process)
    }

    /// The environment for a client of this bus.
    var environment: [String: String] { PrivateBus.isolatedEnvironment(address: address) }

    /// Stops the bus (an activated daemon then exits on its own) and removes its directory.
    func stop() async {
        await process.stop()
        try? FileManager.default.removeItem(at: directory)
    }
}
