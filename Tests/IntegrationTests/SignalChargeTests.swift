import DBus
import Foundation
import XCTest

/// What the daemon sends because of a caller is charged to it, as its replies are: a change
/// signal carries a value only up to `--max-signalled-value-size` (a larger one is announced by
/// invalidation, and readers `Get` it, charged as a reply); the bytes of the signals a writer's
/// changes cause count in its reply quota, and past it its writes are refused; an `Execute`'s
/// reply is charged like a read's, and its `Finished` signal to the uid that ran it. As `nobody`.
final class SignalChargeTests: AccessControlTestCase, @unchecked Sendable {
    override var daemonArguments: [String] { ["--system-access", "--max-reply-bytes-per-uid", "1000000"] }

    private static let writable: [String: DBusValue] = ["writers": .variant(.array(of: .string, [.string("nobody")]))]

    private func pythonAsNobody(_ body: String, timeout: TimeInterval = 60) async throws -> CommandResult {
        let script = """
            import dbus, sys
            bus = dbus.bus.BusConnection(sys.argv[1])
            def put(key, value):
                group, _, name = key.rpartition('.')
                target = bus.get_object('org.propbus.PropBus1', '/org/propbus/PropBus1/' + group.replace('.', '/'), introspect=False)
                target.Set('org.propbus.PropBus1.Values', name, dbus.String(value, variant_level=1), dbus_interface='org.freedesktop.DBus.Properties')
            def execute(key):
                group, _, name = key.rpartition('.')
                target = bus.get_object('org.propbus.PropBus1', '/org/propbus/PropBus1/' + (group + '.' + name).replace('.', '/'), introspect=False)
                return target.Execute(dbus.String('', variant_level=1), dbus_interface='org.propbus.PropBus1.Command', timeout=30)
            def error(e):
                return e.get_dbus_name() + ': ' + e.get_dbus_message()
            """ + "\n" + body
        return try await asNobody("/usr/bin/python3", ["-c", script, bus.address], timeout: timeout)
    }

    func testAValueAboveTheSignalBoundIsAnnouncedByInvalidationAndASmallOneWithItsValue() async throws {
        try await client.create("pub.v", "s", default: .string(""), options: Self.writable)
        let changes = try await client.recordChanges(ofGroup: "pub")
        let result = try await pythonAsNobody("""
            put('pub.v', 'x' * 100000)
            put('pub.v', 'small')
            print('done')
            """)
        XCTAssertEqual(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "done", "\(result)")
        let signals = await changes.wait(count: 2)
        XCTAssertEqual(signals.count, 2, "\(signals)")
        XCTAssertNil(signals.first?.changed["v"], "a 100 kB value went out in a signal")
        XCTAssertEqual(signals.first?.invalidated, ["v"])
        XCTAssertEqual(signals.last?.changed["v"], .string("small"))
        // A reader that follows the invalidation reads the value (charged as its reply).
        let value = try await client.get("pub.v")
        XCTAssertEqual(value, .string("small"))
    }

    func testTheSignalsAWritersChangesCauseAreChargedToItAndPastItsQuotaItsWritesAreRefused() async throws {
        try await client.create("pub.v", "s", default: .string(""), options: Self.writable)
        let changes = try await client.recordChanges(ofGroup: "pub")
        // 4000-byte values travel in the signal: about 4 kB each, charged to nobody, 1 MB in 10 s.
        let result = try await pythonAsNobody("""
            done = 0
            for n in range(1000):
                try:
                    put('pub.v', ('%04d' % n) * 1000)
                    done += 1
                except dbus.exceptions.DBusException as e:
                    print(done, error(e))
                    break
            else:
                print(done, 'never refused')
            """)
        let line = result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let written = Int(line.prefix { $0.isNumber }) ?? -1
        XCTAssertTrue((150...300).contains(written), "writes before the refusal: \(line) \(result.stderr)")
        XCTAssertTrue(line.contains(PropBusAPI.error("LimitsExceeded")) && line.contains("uid \(Self.nobody)")
                      && line.contains("--max-reply-bytes-per-uid"), line)
        // The refused write changed nothing: the last value is the last accepted one.
        try await client.barrier()
        let value = try await client.get("pub.v")
        XCTAssertEqual(value, .string(String(repeating: String(format: "%04d", written - 1), count: 1000)))
        XCTAssertEqual(changes.signals.count, written, "one signal per accepted write")
    }

    func testAnExecutesReplyIsChargedAndPastTheQuotaNothingMoreIsStarted() async throws {
        // 400 kB of output: its reply and its Finished signal, 800 kB per execution.
        try await client.call(PropBusAPI.manager, "CreateCommand", [.string("pub.out"), .vardict([
            "exec": .variant(.array(of: .string, [.string("/bin/sh"), .string("-c"), .string("yes | head -c 400000")])),
            "writers": .variant(.array(of: .string, [.string("nobody")])),
        ])])
        let result = try await pythonAsNobody("""
            for n in range(3):
                try:
                    print(len(execute('pub.out')))
                except dbus.exceptions.DBusException as e:
                    print(error(e))
            """)
        let lines = result.stdout.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 3, "\(result)")
        XCTAssertEqual(lines.first, "399999", "the output, its last newline cut: \(result)")
        let second = lines.dropFirst().first ?? ""
        XCTAssertTrue(second.hasPrefix(PropBusAPI.error("LimitsExceeded")) && second.contains("finished"), "the reply past the quota: \(second)")
        let third = lines.last ?? ""
        XCTAssertTrue(third.hasPrefix(PropBusAPI.error("LimitsExceeded")) && third.contains("uid \(Self.nobody)"), "past the quota nothing starts: \(third)")
        let executions = try await client.call(PropBusAPI.manager, "ListExecutions")
        guard case .array(_, let running)? = executions.first else { return XCTFail("\(executions)") }
        XCTAssertTrue(running.isEmpty, "\(running)")
    }
}

/// On a session bus there are no credentials and no uid to charge: replies are charged to the
/// connection that asked, so one reader that never reads cannot make the bus stop reading from
/// the daemon for everyone; the daemon also watches what the bus holds of its messages
/// (`org.freedesktop.DBus.Debug.Stats`) and refuses large replies while that is past
/// `--max-bus-held-bytes`, whatever the number of connections asking.
final class SessionBusReplyChargeTests: DaemonTestCase, @unchecked Sendable {
    override var busLimits: [String: Int] { ["max_incoming_bytes": 48 << 20, "max_outgoing_bytes": 48 << 20] }
    override var daemonArguments: [String] { ["--max-bus-held-bytes", String(24 << 20)] }

    /// Starts a client that opens `connections` connections and sends `calls` GetAlls of the
    /// 10 MB group on each, then a Set of `attack.done` on the last, reading nothing.
    private func startSlowReader(connections: Int, calls: Int) throws -> ChildProcess {
        let script = """
            import dbus, dbus.lowlevel, sys, time
            buses = [dbus.bus.BusConnection(sys.argv[1]) for _ in range(int(sys.argv[2]))]
            def call(bus, path, member, signature, *arguments):
                message = dbus.lowlevel.MethodCallMessage('org.propbus.PropBus1', path, 'org.freedesktop.DBus.Properties', member)
                message.append(*arguments, signature=signature)
                bus.send_message(message)
            for bus in buses:
                for _ in range(int(sys.argv[3])):
                    call(bus, '/org/propbus/PropBus1/big', 'GetAll', 's', 'org.propbus.PropBus1.Values')
                bus.flush()
            call(buses[-1], '/org/propbus/PropBus1/attack', 'Set', 'ssv', 'org.propbus.PropBus1.Values', 'done', dbus.Boolean(True, variant_level=1))
            buses[-1].flush()
            print('sent', flush=True)
            time.sleep(600)
            """
        return try ChildProcess("/usr/bin/python3", ["-c", script, bus.address, String(connections), String(calls)], environment: bus.environment)
    }

    private func assertServedWhileAReaderNeverReads(connections: Int, calls: Int, file: StaticString = #filePath, line: UInt = #line) async throws {
        for index in 0..<10 {
            try await client.create("big.k\(index)", "s", default: .string(String(repeating: "\(index)", count: 1_000_000)))
        }
        try await client.create("attack.done", "b", default: .boolean(false))
        try await client.create("attack.other", "s", default: .string("still served"))
        let changes = try await client.recordChanges(ofGroup: "attack")
        let reader = try startSlowReader(connections: connections, calls: calls)
        defer { reader.signal(SIGKILL) }
        let done = await changes.wait(timeout: 30) { $0.contains { $0.changed["done"] == .boolean(true) } }
        XCTAssertTrue(done.contains { $0.changed["done"] == .boolean(true) },
                      "the daemon's PropertiesChanged never came out: the bus stopped reading from it", file: file, line: line)
        let other = try await client.get("attack.other")
        XCTAssertEqual(other, .string("still served"), file: file, line: line)
    }

    func testOneConnectionThatNeverReadsDoesNotStallTheDaemon() async throws {
        try await assertServedWhileAReaderNeverReads(connections: 1, calls: 6)
    }

    func testManyConnectionsThatNeverReadDoNotStallTheDaemon() async throws {
        try await assertServedWhileAReaderNeverReads(connections: 4, calls: 2)
    }
}
