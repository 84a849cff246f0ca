import Foundation

/// dconf itself, on a private bus of its own: `dconf-service` activatable by the bus (as a
/// desktop session has it), its database and runtime directory in a temporary directory, and a
/// profile holding only the user database, so nothing of the machine's dconf is read or written.
final class DConfWorld: @unchecked Sendable {
    let directory: URL
    let process: ChildProcess
    let address: String

    private init(directory: URL, process: ChildProcess, address: String) {
        self.directory = directory
        self.process = process
        self.address = address
    }

    /// dconf's variables, pointing into `directory`.
    private static func dconfVariables(_ directory: URL) -> [String: String] {
        [
            "HOME": directory.path,
            "XDG_CONFIG_HOME": directory.appendingPathComponent("config").path,
            "XDG_CACHE_HOME": directory.appendingPathComponent("cache").path,
            "XDG_RUNTIME_DIR": directory.appendingPathComponent("runtime").path,
            "DCONF_PROFILE": directory.appendingPathComponent("profile").path,
        ]
    }

    static func start() async throws -> DConfWorld {
        let directory = try makeTemporaryDirectory(prefix: "pbit-dconf")
        let services = directory.appendingPathComponent("services")
        for sub in ["services", "config", "cache", "runtime"] {
            try FileManager.default.createDirectory(at: directory.appendingPathComponent(sub), withIntermediateDirectories: true)
        }
        chmod(directory.appendingPathComponent("runtime").path, 0o700)
        try "user-db:user\n".write(to: directory.appendingPathComponent("profile"), atomically: true, encoding: .utf8)
        // No systemd here: the bus starts the service itself.
        let installed = try String(contentsOfFile: "/usr/share/dbus-1/services/ca.desrt.dconf.service", encoding: .utf8)
        try installed.split(separator: "\n").filter { !$0.hasPrefix("SystemdService=") }.joined(separator: "\n")
            .write(to: services.appendingPathComponent("ca.desrt.dconf.service"), atomically: true, encoding: .utf8)
        let socketPath = directory.appendingPathComponent("bus").path
        let configuration = PrivateBus.configuration(socketPath: socketPath, limits: ["service_start_timeout": 20000],
                                                     serviceDirectory: services.path)
        let configURL = directory.appendingPathComponent("bus.conf")
        try configuration.write(to: configURL, atomically: true, encoding: .utf8)
        // The activated dconf-service inherits the bus's environment.
        let environment = PrivateBus.isolatedEnvironment(address: nil).merging(dconfVariables(directory)) { $1 }
        let (process, address) = try await PrivateBus.launch(configURL, environment: environment, directory: directory)
        return DConfWorld(directory: directory, process: process, address: address)
    }

    var environment: [String: String] {
        PrivateBus.isolatedEnvironment(address: address).merging(Self.dconfVariables(directory)) { $1 }
    }

    /// `dconf ARGS…`, with `stdin` for `dconf load`.
    func dconf(_ arguments: [String], stdin: String? = nil) async throws -> CommandResult {
        try await runCommand("dconf", arguments, environment: environment, stdin: stdin, timeout: 60)
    }

    /// Stops the bus (dconf-service leaves with it) and removes the directory.
    func stop() async {
        await process.stop()
        try? FileManager.default.removeItem(at: directory)
    }
}
