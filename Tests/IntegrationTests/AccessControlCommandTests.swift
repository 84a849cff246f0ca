import DBus
import Foundation
import XCTest

/// Access control (docs/security.md) for commands: executing needs writer rights on the command, and only the default
/// writers may create or delete one (its argv runs as the daemon's user).
final class AccessControlCommandTests: AccessControlTestCase, @unchecked Sendable {
    private let path = "/org/propbus/PropBus1/jobs/echo"

    func testNobodyReadsCommandStateButMayNotRunCreateOrDeleteIt() async throws {
        try await client.createCommand("jobs.echo", ["exec": .array(of: .string, [.string("echo"), .string("hi")])])
        let enabled = try await busctlAsNobody(["get-property", PropBusAPI.busName, path, Client.commandInterface, "Enabled"])
        XCTAssertEqual(enabled.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "b true", "\(enabled)")
        assertDenied(try await gdbusAsNobody(path, "org.propbus.PropBus1.Command.Execute", ["<'x'>"]), naming: "jobs.echo")
        assertDenied(try await gdbusAsNobody(path, "org.propbus.PropBus1.Command.Start", ["<'x'>"]), naming: "jobs.echo")
        assertDenied(try await propctlAsNobody(["exec", "jobs.echo"]), naming: "jobs.echo")
        assertDenied(try await gdbusAsNobody(PropBusAPI.rootPath, "org.propbus.PropBus1.Manager.CreateCommand", ["jobs.mine", "{'exec': <['id']>}"]), naming: "jobs.mine")
        assertDenied(try await gdbusAsNobody(PropBusAPI.rootPath, "org.propbus.PropBus1.Manager.DeleteCommand", ["jobs.echo"]),
                     naming: "jobs.echo")
        let executing = try await client.commandProperty("jobs.echo", "Executing")
        XCTAssertEqual(executing, .boolean(false), "nothing ran")
        let result = try await client.execute("jobs.echo")
        XCTAssertEqual(result, .string("hi"), "root runs it")
    }

    func testWritersOfACommandMayRunItButStillNotRedefineIt() async throws {
        try await client.createCommand("jobs.echo", ["exec": .array(of: .string, [.string("echo"), .string("hi")]),
                                                     "writers": .array(of: .string, [.string("nobody")])])
        let run = try await gdbusAsNobody(path, "org.propbus.PropBus1.Command.Execute", ["<'x'>"])
        assertSucceeded(run)
        XCTAssertTrue(run.stdout.contains("<'hi'>"), run.stdout)
        // A new argv would run as propbusd's user: only the default writers may set one.
        assertDenied(try await gdbusAsNobody(PropBusAPI.rootPath, "org.propbus.PropBus1.Manager.CreateCommand", ["jobs.echo", "{'exec': <['id']>}"]), naming: "jobs.echo")
    }
}
