import DBus
import Foundation
import XCTest

/// What history keeps because of a caller is charged to that caller, bounded, and read back
/// within bounds: a value above `--history-max-value-size` is kept as its digest, a uid's
/// history bytes are its `history-bytes` quota (its own oldest rows go first past it), a filtered
/// listing reads a bounded number of rows per call and says where to go on, a page is cut to
/// what the caller may still be sent, and a key's history keeps the rules of the definition it
/// belonged to. Checked as `nobody` on a system-like bus.
final class HistoryChargeTests: AccessControlTestCase, @unchecked Sendable {
    override var daemonArguments: [String] {
        ["--system-access", "--history-max-value-size", "4096", "--quota", "history-bytes=60000"]
    }

    private static let writable: [String: DBusValue] = ["writers": .variant(.array(of: .string, [.string("nobody")]))]

    /// Runs python3-dbus as nobody with `body` after a prologue defining `bus`, `manager(member, *args)`
    /// and `put(key, value)` (a Set of a string); prints what `body` prints.
    private func pythonAsNobody(_ body: String, timeout: TimeInterval = 60) async throws -> CommandResult {
        let script = """
            import dbus, sys
            bus = dbus.bus.BusConnection(sys.argv[1])
            root = bus.get_object('org.propbus.PropBus1', '/org/propbus/PropBus1', introspect=False)
            def manager(member, *args):
                return getattr(root, member)(*args, dbus_interface='org.propbus.PropBus1.Manager')
            def put(key, value):
                group, _, name = key.rpartition('.')
                target = bus.get_object('org.propbus.PropBus1', '/org/propbus/PropBus1/' + group.replace('.', '/'), introspect=False)
                target.Set('org.propbus.PropBus1.Values', name, dbus.String(value, variant_level=1), dbus_interface='org.freedesktop.DBus.Properties')
            def error(e):
                return e.get_dbus_name() + ': ' + e.get_dbus_message()
            """ + "\n" + body
        return try await asNobody("/usr/bin/python3", ["-c", script, bus.address], timeout: timeout)
    }

    private func listHistory(_ prefix: String, after: UInt64 = 0, limit: UInt32 = 0, _ filter: [String: DBusValue] = [:]) async throws -> (rows: [[String: DBusValue]], next: UInt64) {
        let reply = try await client.call(PropBusAPI.manager, "ListHistory", [.string(prefix), .uint64(after), .uint32(limit), .vardict(filter)])
        guard reply.count == 2, case .array(_, let rows) = reply[0], case .uint64(let next) = reply[1] else {
            throw TestSetupError("ListHistory answered \(reply)")
        }
        return (rows.compactMap { $0.stringKeyedEntries?.mapValues(\.unwrappingVariant) }, next)
    }

    private func historyBytes(of uid: UInt32) async throws -> UInt64? {
        let reply = try await client.call(PropBusAPI.manager, "GetUsage", [.uint32(uid)])
        guard case .structure(let fields)? = reply.first?.stringKeyedEntries?["history-bytes"], case .uint64(let used)? = fields.first else { return nil }
        return used
    }

    func testAValueAboveTheBoundIsKeptAsItsDigestAndTheRowIsChargedToItsWriter() async throws {
        try await client.create("pub.big", "s", default: .string(""), options: Self.writable)
        let big = String(repeating: "x", count: 100_000)
        let result = try await pythonAsNobody("""
            put('pub.big', 'x' * 100000)
            put('pub.big', 'small')
            print('done')
            """)
        XCTAssertEqual(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "done", "\(result)")
        let rows = try await listHistory("pub.big").rows
        let first = try XCTUnwrap(rows.first { $0["via"] == .string("Set") && $0["new"] == nil }, "\(rows.map { $0.keys.sorted() })")
        guard case .uint64(let size)? = first["new_size"] else { return XCTFail("no new_size: \(first.keys.sorted())") }
        XCTAssertTrue((big.utf8.count..<big.utf8.count + 64).contains(Int(size)), "the value's marshalled size: \(size)")
        XCTAssertEqual(first["new_sha256"]?.stringValue?.count, 64, "\(first.keys.sorted())")
        let second = try XCTUnwrap(rows.last)
        XCTAssertEqual(second["new"], .string("small"))
        XCTAssertNil(second["old"], "the old value was kept as a digest only")
        XCTAssertEqual(second["old_sha256"], first["new_sha256"])
        // The two rows are charged to nobody: their digests and fields, not 100 kB.
        let used = try await historyBytes(of: Self.nobody)
        XCTAssertNotNil(used, "GetUsage has no history-bytes")
        XCTAssertLessThan(used ?? .max, 2000)
        XCTAssertGreaterThan(used ?? 0, 0)

        // Revert cannot put back a value history keeps as a digest only: it says so.
        let change = try XCTUnwrap(second["change"].flatMap { if case .uint64(let v) = $0 { v } else { nil } })
        do {
            _ = try await client.call(PropBusAPI.manager, "Revert", [.array(of: .string, []), .uint64(0), .uint64(change), .boolean(false)])
            XCTFail("a digest was reverted to")
        } catch let error as DBusError {
            XCTAssertTrue(error.message.contains("digest") && error.message.contains("pub.big"), error.message)
        }
    }

    func testAUidsHistoryHoldsAtMostItsQuotaItsOwnOldestRowsGoingFirst() async throws {
        try await client.create("pub.a", "s", default: .string(""), options: Self.writable)
        try await client.create("root.keep", "s", default: .string(""))
        try await client.set("root.keep", .string(String(repeating: "r", count: 3000)))
        // 40 rows of about 3 kB each: twice the quota of 60000 bytes.
        let result = try await pythonAsNobody("""
            for n in range(40):
                put('pub.a', ('%02d' % n) * 1500)
            print('done')
            """)
        XCTAssertEqual(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "done", "\(result)")
        // Pruning runs in steps between rounds: wait until it is within its quota.
        let within = await eventually(timeout: 20) { ((try? await self.historyBytes(of: Self.nobody)) ?? .max) <= 60000 }
        let used = try await historyBytes(of: Self.nobody)
        XCTAssertTrue(within, "nobody still holds \(used ?? 0) bytes of history")
        let rows = try await listHistory("pub.a").rows
        XCTAssertLessThan(rows.count, 40)
        XCTAssertEqual(rows.last?["new"], .string(String(repeating: "39", count: 1500)), "the latest rows are kept")
        // Root's row is not what made room.
        let kept = try await listHistory("root.keep").rows
        XCTAssertEqual(kept.last?["new"], .string(String(repeating: "r", count: 3000)))
    }

    func testAFilterMatchingFewRowsReadsABoundedNumberPerCallAndSaysWhereToGoOn() async throws {
        // 100 keys under `few.`, one row each, among 12000 rows of other keys.
        var assignments: [(String, DBusValue)] = []
        for index in 0..<100 {
            try await client.create("few.k\(index)", "i", default: .int32(0))
        }
        for index in 0..<1200 { try await client.create("many.k\(index)", "i", default: .int32(0)) }
        for round in 1...10 {
            assignments = (0..<1200).map { ("many.k\($0)", DBusValue.int32(Int32(round))) }
            try await client.apply(set: assignments)
        }
        try await client.apply(set: (0..<100).map { ("few.k\($0)", DBusValue.int32(1)) })
        // Every change of `few.`, through the cursor: more than one call, none with more rows than
        // asked, together all 200 rows (100 created, 100 changed), in order.
        var after: UInt64 = 0, calls = 0, seen: [UInt64] = []
        repeat {
            let page = try await listHistory("few.", after: after, limit: 1000)
            calls += 1
            seen += page.rows.compactMap { if case .uint64(let v)? = $0["revision"] { v } else { nil } }
            after = page.next
        } while after != 0 && calls < 100
        XCTAssertEqual(seen.count, 200)
        XCTAssertEqual(seen, seen.sorted())
        XCTAssertGreaterThan(calls, 1, "one call read all 12000 other rows")
        // A uid filter that matches nothing answers at once, without a cursor to follow.
        let none = try await listHistory("", limit: 10, ["uid": .uint32(4242)])
        XCTAssertTrue(none.rows.isEmpty)
        XCTAssertEqual(none.next, 0)
    }

    func testAPageIsCutToWhatTheCallerMayStillBeSent() async throws {
        try await restartDaemon(arguments: ["--system-access", "--max-reply-bytes-per-uid", "300000"])
        try await client.create("pub.page", "s", default: .string(""))
        for index in 0..<10 { try await client.set("pub.page", .string(String(repeating: "\(index)", count: 60_000))) }
        // Ten rows of about 120 kB (old and new): no page of them fits nobody's 300 kB, so each
        // call returns what fits and where to go on, never LimitsExceeded for the whole page.
        let result = try await pythonAsNobody("""
            rows, next = manager('ListHistory', 'pub.page', dbus.UInt64(0), dbus.UInt32(0), dbus.Dictionary({}, signature='sv'))
            print(len(rows), int(next))
            """)
        let fields = result.stdout.split(separator: " ").compactMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        XCTAssertEqual(fields.count, 2, "\(result)")
        XCTAssertGreaterThan(fields.first ?? 0, 0, "\(result)")
        XCTAssertLessThan(fields.first ?? 99, 11, "\(result)")
        XCTAssertNotEqual(fields.last, 0, "more rows come: \(result)")
    }

    func testADeletedSecretsHistoryStaysRedactedWhenItsNameComesBackPublic() async throws {
        let secret: [String: DBusValue] = ["secret": .variant(.boolean(true)), "writers": .variant(.array(of: .string, [.string("root")]))]
        try await client.create("vault.k", "s", default: .string(""), options: secret)
        try await client.set("vault.k", .string("s3cret-old"))
        let then = try await client.getWithRevision("vault.k").revision
        try await client.delete("vault.k")
        try await client.create("vault.k", "s", default: .string("public"), options: Self.writable)
        try await client.set("vault.k", .string("new"))
        let read = try await pythonAsNobody("""
            rows, next = manager('ListHistory', 'vault.k', dbus.UInt64(0), dbus.UInt32(0), dbus.Dictionary({}, signature='sv'))
            for row in rows:
                print(dict(row))
            """)
        XCTAssertTrue(read.succeeded, "\(read)")
        XCTAssertFalse(read.stdout.contains("s3cret-old"), "a deleted secret's value read by nobody: \(read.stdout)")
        XCTAssertTrue(read.stdout.contains("new"), "the new definition's values are public: \(read.stdout)")
        // Revert never carries a value across definitions, for root either.
        do {
            _ = try await client.call(PropBusAPI.manager, "Revert", [.array(of: .string, [.string("vault.k")]), .uint64(then), .uint64(0), .boolean(false)])
            XCTFail("the old definition's value was reverted to")
        } catch let error as DBusError {
            XCTAssertTrue(error.message.contains("vault.k") && error.message.contains("deleted"), error.message)
        }
        let value = try await client.get("vault.k")
        XCTAssertEqual(value, .string("new"))
    }
}
