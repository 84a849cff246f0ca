import DBus
import Foundation
import XCTest

/// A daemon test case on a private *system* bus (Debian's policy plus the project's policy file),
/// with `propbusd --system-access`, and helpers that call it as the unprivileged user `nobody`
/// (uid and gid 65534, no supplementary groups) through `setpriv`.
///
/// The test process and its ``client`` are root. Skipped when not run as root: only root can
/// switch to another user.
class AccessControlTestCase: DaemonTestCase, @unchecked Sendable {
    static let nobody = AsNobody.uid
    static let accessDenied = PropBusAPI.standard("AccessDenied")

    override var busKind: PrivateBus.Kind { .system }
    override var daemonArguments: [String] { ["--system-access"] }

    override func setUp() async throws {
        guard getuid() == 0 else { throw XCTSkip("calling as another user (setpriv) needs root") }
        try await super.setUp()
    }

    /// Runs `executable` as `nobody` with the private bus as its only bus.
    func asNobody(_ executable: String, _ arguments: [String], timeout: TimeInterval = 15) async throws -> CommandResult {
        var environment = bus.environment
        // nobody's tools must not try to write into root's home.
        environment["HOME"] = "/nonexistent"
        return try await AsNobody.run(executable, arguments, environment: environment, timeout: timeout)
    }

    /// `busctl --address=<bus> -- …` as nobody.
    func busctlAsNobody(_ arguments: [String]) async throws -> CommandResult {
        try await asNobody("busctl", ["--address=\(bus.address)", "--"] + arguments)
    }

    /// `gdbus call` as nobody: GVariant text arguments, and the error's name and message on stderr.
    func gdbusAsNobody(_ path: String, _ method: String, _ arguments: [String]) async throws -> CommandResult {
        try await asNobody("gdbus", ["call", "--address", bus.address, "--dest", PropBusAPI.busName,
                                     "--object-path", path, "--method", method, "--timeout", "10"] + arguments)
    }

    /// `dbus-send --print-reply` as nobody.
    func dbusSendAsNobody(_ arguments: [String]) async throws -> CommandResult {
        try await asNobody("dbus-send", ["--bus=\(bus.address)", "--print-reply", "--reply-timeout=10000",
                                         "--dest=\(PropBusAPI.busName)"] + arguments)
    }

    /// `propctl --address <bus> …` as nobody.
    func propctlAsNobody(_ arguments: [String]) async throws -> CommandResult {
        try await asNobody(BuildProducts.propctl, ["--address", bus.address] + arguments)
    }

    /// `Properties.Set` of `key` as nobody, through gdbus; `value` is GVariant text (`true`, `42`).
    func setAsNobody(_ key: String, _ value: String) async throws -> CommandResult {
        let (path, name) = PropBusAPI.locate(key)
        return try await gdbusAsNobody(path, "org.freedesktop.DBus.Properties.Set", [PropBusAPI.values, name, "<\(value)>"])
    }

    /// `Properties.Get` of `key` as nobody, through gdbus.
    func getAsNobody(_ key: String) async throws -> CommandResult {
        let (path, name) = PropBusAPI.locate(key)
        return try await gdbusAsNobody(path, "org.freedesktop.DBus.Properties.Get", [PropBusAPI.values, name])
    }

    /// Asserts that the daemon (not the bus) refused a call of nobody's with `AccessDenied`,
    /// naming `key` and nobody's uid.
    func assertDenied(_ result: CommandResult, naming key: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertFalse(result.succeeded, "expected AccessDenied: \(result)", file: file, line: line)
        XCTAssertTrue(result.stderr.contains(Self.accessDenied), "not AccessDenied: \(result)", file: file, line: line)
        XCTAssertTrue(result.stderr.contains("uid \(Self.nobody) may not"), "the message does not name the caller: \(result)", file: file, line: line)
        XCTAssertTrue(result.stderr.contains(" \(key)"), "the message does not name \(key): \(result)", file: file, line: line)
    }

    /// Asserts that a command succeeded, showing its output otherwise.
    func assertSucceeded(_ result: CommandResult, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertTrue(result.succeeded, "\(result)", file: file, line: line)
    }
}
