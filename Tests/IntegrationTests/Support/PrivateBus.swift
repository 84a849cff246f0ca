import Foundation

/// A private `dbus-daemon` in a temporary directory, started for one test and torn down after it.
///
/// The machine's own session and system buses are never touched: every child started through
/// ``environment`` sees this bus as both its session and its system bus.
final class PrivateBus: @unchecked Sendable {
    /// Which policy the bus enforces.
    enum Kind {
        /// Everything allowed, for the test's own user: like a session bus.
        case session
        /// Like Debian's system bus (default deny for owning names and method calls, replies
        /// and signals allowed), plus the project's `systemd/org.propbus.PropBus1.conf`, with the
        /// socket reachable by other users (`nobody`).
        case system
    }

    /// The address `dbus-daemon` printed, e.g. `unix:path=/tmp/pbit-bus.x/bus,guid=…`.
    let address: String
    let directory: URL
    let process: ChildProcess
    let kind: Kind

    /// The project's system bus policy, as installed to /usr/share/dbus-1/system.d.
    static let policyFile: URL = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("systemd/org.propbus.PropBus1.conf")

    /// The minimal policy that lets replies through (see PITFALLS: `<allow user="*"/>` breaks
    /// every reply). `serviceDirectory` adds a `<servicedir>` (``ActivationBus``'s: this bus
    /// itself must never start anything).
    static func configuration(socketPath: String, maxMessageSize: Int? = nil, limits: [String: Int] = [:],
                              serviceDirectory: String? = nil) -> String {
        var limits = limits
        if let maxMessageSize { limits["max_message_size"] = maxMessageSize }
        return document(type: "session", socketPath: socketPath, limits: limits, """
          \(serviceDirectory.map { "<servicedir>\($0)</servicedir>" } ?? "")
          <policy context="default">
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
            <allow own="*"/>
          </policy>
        """)
    }

    /// A system bus as Debian's /usr/share/dbus-1/system.conf sets it up, with `policy` (the
    /// project's policy file by default) included. The daemon runs as root in tests, so root may
    /// own its name unless `rootOwnsName` is false (on a real system only the `propbus` user may,
    /// by the policy file); `serviceUser` may own it too (a test's stand-in for `propbus`).
    static func systemConfiguration(socketPath: String, policy: URL = policyFile, rootOwnsName: Bool = true,
                                    serviceUser: String? = nil, limits: [String: Int] = [:]) -> String {
        document(type: "system", socketPath: socketPath, limits: limits, """
          <policy context="default">
            <allow user="*"/>
            <deny own="*"/>
            <deny send_type="method_call"/>
            <allow send_type="signal"/>
            <allow send_requested_reply="true" send_type="method_return"/>
            <allow send_requested_reply="true" send_type="error"/>
            <allow receive_type="method_call"/>
            <allow receive_type="method_return"/>
            <allow receive_type="error"/>
            <allow receive_type="signal"/>
            <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
            <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
            <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
            <deny send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus" send_member="UpdateActivationEnvironment"/>
            <deny send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Debug.Stats"/>
          </policy>
          \(rootOwnsName ? #"<policy user="root"><allow own="org.propbus.PropBus1"/></policy>"# : "")
          \(serviceUser.map { #"<policy user="\#($0)"><allow own="org.propbus.PropBus1"/></policy>"# } ?? "")
          <include>\(policy.path)</include>
        """)
    }

    /// A bus configuration of `type` listening on `socketPath` with `body` (its policies), then
    /// the limits every test bus raises and `limits` over them: pending replies from 128, so
    /// pipelined clients are not refused, match rules, and the reply timeout.
    private static func document(type: String, socketPath: String, limits: [String: Int], _ body: String) -> String {
        let raised = ["max_replies_per_connection": 50000, "max_match_rules_per_connection": 50000, "reply_timeout": 60000]
        return """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>\(type)</type>
          <listen>unix:path=\(socketPath)</listen>
          <auth>EXTERNAL</auth>
        \(body)
          \(limitElements(raised.merging(limits) { $1 }))
        </busconfig>
        """
    }

    /// `<limit>` elements for `limits` (e.g. `max_incoming_bytes`), in name order.
    private static func limitElements(_ limits: [String: Int]) -> String {
        limits.sorted { $0.key < $1.key }.map { "<limit name=\"\($0.key)\">\($0.value)</limit>" }.joined(separator: "\n  ")
    }

    private init(address: String, directory: URL, process: ChildProcess, kind: Kind) {
        self.address = address
        self.directory = directory
        self.process = process
        self.kind = kind
    }

    /// Starts a bus and waits until it has printed its address. `maxMessageSize` sets the
    /// session bus's `max_message_size`, so oversized-message cases run in seconds.
    /// On a system bus, `serviceUser` may own propbusd's name as root may.
    static func start(_ kind: Kind = .session, maxMessageSize: Int? = nil, limits: [String: Int] = [:],
                      serviceUser: String? = nil) async throws -> PrivateBus {
        let directory = try makeTemporaryDirectory(prefix: "pbit-bus")
        let configURL = directory.appendingPathComponent("bus.conf")
        let socketPath = directory.appendingPathComponent("bus").path
        switch kind {
        case .session:
            try configuration(socketPath: socketPath, maxMessageSize: maxMessageSize, limits: limits).write(to: configURL, atomically: true, encoding: .utf8)
        case .system:
            try systemConfiguration(socketPath: socketPath, serviceUser: serviceUser, limits: limits).write(to: configURL, atomically: true, encoding: .utf8)
            // mkdtemp makes the directory 0700; other users must reach the socket inside.
            chmod(directory.path, 0o755)
        }
        let (process, address) = try await launch(configURL, environment: isolatedEnvironment(address: nil), directory: directory)
        return PrivateBus(address: address, directory: directory, process: process, kind: kind)
    }

    /// Runs `dbus-daemon` with the configuration at `configURL` and waits until it has printed its
    /// address; if it does not, stops it, removes `directory` and throws.
    static func launch(_ configURL: URL, environment: [String: String], directory: URL) async throws -> (ChildProcess, String) {
        let process = try ChildProcess("dbus-daemon", ["--config-file=\(configURL.path)", "--nofork", "--print-address"],
                                       environment: environment)
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
        return (process, address)
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
        // scripts/sanitize: the programs under test (propbusd, propctl) check for leaks and log
        // to files; the test process itself does not (XCTest's own allocations are not ours).
        if let options = environment["PROPBUS_CHILD_ASAN_OPTIONS"] { environment["ASAN_OPTIONS"] = options }
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
