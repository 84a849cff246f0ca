import Foundation

/// A private `dbus-daemon` in a temporary directory, started for one test and torn down after it.
///
/// The machine's own session and system buses are never touched: every child started through
/// ``environment`` sees this bus as both its session and its system bus.
final class PrivateBus: @unchecked Sendable {
    /// The address `dbus-daemon` printed, e.g. `unix:path=/tmp/pbit-bus.x/bus,guid=…`.
    let address: String
    let directory: URL
    let process: ChildProcess

    /// The minimal policy that lets replies through (see PITFALLS: `<allow user="*"/>` breaks
    /// every reply), and the pending-reply limit raised from 128 so pipelined clients are not
    /// refused.
    static func configuration(socketPath: String) -> String {
        """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>session</type>
          <listen>unix:path=\(socketPath)</listen>
          <auth>EXTERNAL</auth>
          <policy context="default">
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
            <allow own="*"/>
          </policy>
          <limit name="max_replies_per_connection">50000</limit>
          <limit name="max_match_rules_per_connection">50000</limit>
          <limit name="reply_timeout">60000</limit>
        </busconfig>
        """
    }

    private init(address: String, directory: URL, process: ChildProcess) {
        self.address = address
        self.directory = directory
        self.process = process
    }

    /// Starts a bus and waits until it has printed its address.
    static func start() async throws -> PrivateBus {
        let directory = try makeTemporaryDirectory(prefix: "pbit-bus")
        let configURL = directory.appendingPathComponent("bus.conf")
        try configuration(socketPath: directory.appendingPathComponent("bus").path)
            .write(to: configURL, atomically: true, encoding: .utf8)
        let process = try ChildProcess("dbus-daemon", ["--config-file=\(configURL.path)", "--nofork", "--print-address"],
                                       environment: isolatedEnvironment(address: nil))
        var address = ""
        let printed = await eventually(timeout: 10) {
            let lines = process.stdout.split(separator: "\n")
            if let first = lines.first, process.stdout.hasSuffix("\n") { address = String(first) }
            return !address.isEmpty || !process.isRunning
        }
        guard printed, !address.isEmpty else {
            await process.stop()
            try? FileManager.default.removeItem(at: directory)
            throw TestSetupError("dbus-daemon did not print its address: \(process.stderr)")
        }
        return PrivateBus(address: address, directory: directory, process: process)
    }

    /// The environment for every child on this bus. State directories point into the bus's
    /// temporary directory, so a daemon that persists never writes to the user's home and each
    /// test starts from an empty store.
    var environment: [String: String] {
        var environment = Self.isolatedEnvironment(address: address)
        environment["STATE_DIRECTORY"] = directory.appendingPathComponent("state").path
        environment["XDG_STATE_HOME"] = directory.appendingPathComponent("xdg-state").path
        environment["XDG_CONFIG_HOME"] = directory.appendingPathComponent("xdg-config").path
        return environment
    }

    /// The test's environment with every bus variable pointing at `address` (or removed).
    static func isolatedEnvironment(address: String?) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        for name in ["DBUS_SESSION_BUS_ADDRESS", "DBUS_SYSTEM_BUS_ADDRESS", "DBUS_STARTER_ADDRESS",
                     "DBUS_STARTER_BUS_TYPE", "NOTIFY_SOCKET"] {
            environment[name] = nil
        }
        if let address {
            environment["DBUS_SESSION_BUS_ADDRESS"] = address
            environment["DBUS_SYSTEM_BUS_ADDRESS"] = address
        }
        // Keep libdbus and GLib from falling back to the user's runtime-dir bus.
        environment["XDG_RUNTIME_DIR"] = nil
        return environment
    }

    /// Stops the bus and removes its directory.
    func stop() async {
        await process.stop()
        try? FileManager.default.removeItem(at: directory)
    }

    /// Kills the bus at once, as a crash would: clients see their connection drop.
    func crash() async {
        process.signal(SIGKILL)
        _ = await process.waitForExit(timeout: 5)
    }
}
