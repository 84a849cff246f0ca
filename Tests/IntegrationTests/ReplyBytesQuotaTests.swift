import DBus
import Foundation
import XCTest

/// A caller that never reads its replies must not make dbus-daemon stop
/// reading from the daemon. dbus-daemon counts the replies it holds for a slow reader against
/// the daemon's own `max_incoming_bytes`, and stops reading the daemon's socket past it: every
/// other client then waits. Reply bytes are charged to the caller's uid instead.
final class ReplyBytesQuotaTests: AccessControlTestCase, @unchecked Sendable {
    /// A bus that holds little for the daemon: past 48 MiB of the daemon's messages not yet
    /// delivered, it stops reading from the daemon.
    override var busLimits: [String: Int] {
        ["max_incoming_bytes": 48 << 20, "max_outgoing_bytes": 48 << 20]
    }

    /// A group whose `GetAll` is about 10 MB.
    private func createBigGroup() async throws {
        for index in 0..<10 {
            try await client.create("big.k\(index)", "s", default: .string(String(repeating: "\(index)", count: 1_000_000)))
        }
    }

    /// Starts, as nobody, a client that sends `calls` `GetAll`s of the big group and then a Set
    /// of `attack.done`, and never reads anything.
    private func startSlowReader(calls: Int) throws -> ChildProcess {
        let script = """
            import dbus, dbus.lowlevel, sys, time
            bus = dbus.bus.BusConnection(sys.argv[1])
            def call(path, member, signature, *arguments):
                message = dbus.lowlevel.MethodCallMessage('org.propbus.PropBus1', path, 'org.freedesktop.DBus.Properties', member)
                message.append(*arguments, signature=signature)
                bus.send_message(message)
            for _ in range(int(sys.argv[2])):
                call('/org/propbus/PropBus1/big', 'GetAll', 's', 'org.propbus.PropBus1.Values')
            call('/org/propbus/PropBus1/attack', 'Set', 'ssv', 'org.propbus.PropBus1.Values', 'done', dbus.Boolean(True, variant_level=1))
            bus.flush()
            print('sent', flush=True)
            time.sleep(600)
            """
        var environment = bus.environment
        environment["HOME"] = "/nonexistent"
        let (program, arguments) = try AsNobody.command("/usr/bin/python3", ["-c", script, bus.address, String(calls)])
        return try ChildProcess(program, arguments, environment: environment)
    }

    func testAReaderThatNeverReadsDoesNotStallTheDaemonForOthers() async throws {
        try await createBigGroup()
        try await client.create("attack.done", "b", default: .boolean(false), options: ["writers": .array(of: .string, [.string("nobody")])])
        try await client.create("attack.other", "s", default: .string("still served"))
        let changes = try await client.recordChanges(ofGroup: "attack")
        // 60 MB of replies the reader never reads: more than the bus holds for the daemon.
        let reader = try startSlowReader(calls: 6)
        defer { reader.signal(SIGKILL) }
        // The reader's calls are handled in order: its Set, after all its GetAlls, is the barrier.
        let done = await changes.wait(timeout: 30) { $0.contains { $0.changed["done"] == .boolean(true) } }
        XCTAssertTrue(done.contains { $0.changed["done"] == .boolean(true) },
                      "the daemon's PropertiesChanged never came out: the bus stopped reading from it (reader: \(reader.stderr))")
        let other = try await client.get("attack.other")
        XCTAssertEqual(other, .string("still served"))
    }

    func testRepliesPastTheQuotaAreLimitsExceededNamingTheQuotaAndTheUid() async throws {
        try await createBigGroup()
        try await client.create("attack.done", "b", default: .boolean(false), options: ["writers": .array(of: .string, [.string("nobody")])])
        let result = try await asNobody("/usr/bin/python3", ["-c", """
            import dbus, sys
            bus = dbus.bus.BusConnection(sys.argv[1])
            big = bus.get_object('org.propbus.PropBus1', '/org/propbus/PropBus1/big')
            for _ in range(4):
                try:
                    big.GetAll('org.propbus.PropBus1.Values', dbus_interface='org.freedesktop.DBus.Properties')
                    print('answered')
                except dbus.exceptions.DBusException as e:
                    print(e.get_dbus_name(), e.get_dbus_message())
            # The refusals leave the caller's writes working.
            attack = bus.get_object('org.propbus.PropBus1', '/org/propbus/PropBus1/attack')
            attack.Set('org.propbus.PropBus1.Values', 'done', dbus.Boolean(True, variant_level=1), dbus_interface='org.freedesktop.DBus.Properties')
            print('set')
            """, bus.address], timeout: 60)
        var lines = result.stdout.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.popLast(), "set", "\(result)")
        XCTAssertEqual(lines.count, 4, "\(result)")
        // 32 MiB in 10 s by default: three 10 MB replies, then a refusal.
        XCTAssertEqual(lines.prefix(3), ["answered", "answered", "answered"], "\(result)")
        for line in lines.dropFirst(3) {
            XCTAssertTrue(line.hasPrefix(PropBusAPI.error("LimitsExceeded")), line)
            XCTAssertTrue(line.contains("uid \(Self.nobody)") && line.contains("--max-reply-bytes-per-uid"), line)
        }
        // Root is not held to it.
        for _ in 0..<5 { _ = try await client.getAll(group: "big") }
    }
}
