import DBus
import Foundation
import XCTest

/// Every resource an unprivileged caller holds is charged to its uid, with a quota
/// per uid (root and the daemon's own user exempt), answered with `LimitsExceeded` naming the
/// quota and the uid. Run as `nobody` on a system-like bus with `--system-access`.
final class AccessControlQuotaTests: AccessControlTestCase, @unchecked Sendable {
    static let limitsExceeded = PropBusAPI.error("LimitsExceeded")
    private let nobodyWriters: [String: DBusValue] = ["writers": .array(of: .string, [.string("nobody")])]

    override var daemonArguments: [String] { ["--system-access", "--max-value-size", "16384", "--max-executions", "8"] }

    /// Nobody's persistent Bind of `mine.a` from `public.n` through `value + n` (each `n` a
    /// channel of its own), from a connection of its own (one gdbus process each).
    private func persistentBindAsNobody(_ n: Int) async throws -> CommandResult {
        try await gdbusAsNobody(PropBusAPI.rootPath, "org.propbus.PropBus1.Manager.Bind",
                                ["mine.a", "public.n", "{'direction': <'from'>, 'persistent': <true>, 'to_key': <'value + \(n)'>}"])
    }

    private func assertOverQuota(_ result: CommandResult, _ quota: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertFalse(result.succeeded, "expected LimitsExceeded: \(result)", file: file, line: line)
        XCTAssertTrue(result.stderr.contains(Self.limitsExceeded), "not LimitsExceeded: \(result)", file: file, line: line)
        XCTAssertTrue(result.stderr.contains("uid \(Self.nobody)"), "the message does not name the uid: \(result)", file: file, line: line)
        XCTAssertTrue(result.stderr.contains("--quota \(quota)"), "the message does not name the quota \(quota): \(result)", file: file, line: line)
    }

    // MARK: Bindings (defect 4)

    func testPersistentBindingsOverManyConnectionsStopAtTheQuotaAlsoAfterARestart() async throws {
        try await client.create("mine.a", "i", default: .int32(0), options: nobodyWriters)
        try await client.create("public.n", "i", default: .int32(3))
        // The default quota is 64 bindings per uid; every Bind comes from a new connection.
        for n in 0..<64 {
            let result = try await persistentBindAsNobody(n)
            guard result.succeeded else { return XCTFail("binding \(n) of 64 was refused: \(result)") }
        }
        assertOverQuota(try await persistentBindAsNobody(64), "bindings")
        // Binding the same channel again is no new binding: the existing one is the answer.
        assertSucceeded(try await persistentBindAsNobody(5))

        try await restartDaemon(arguments: daemonArguments)
        assertOverQuota(try await persistentBindAsNobody(65), "bindings")
        // Root is exempt.
        _ = try await client.call(PropBusAPI.manager, "Bind", [.string("mine.a"), .string("public.n"),
                                                               .vardict(["direction": .string("from"), "persistent": .boolean(true), "to_key": .string("value + 99")])])
    }

    // MARK: Executions and their input (defect 5)

    private func makeSleeper() async throws {
        try await client.createCommand("jobs.sleep", ["exec": .array(of: .string, [.string("sleep"), .string("60")]),
                                                      "concurrent": .boolean(true), "writers": .array(of: .string, [.string("nobody")])])
    }

    private func startAsNobody(_ input: String = "<''>") async throws -> CommandResult {
        try await gdbusAsNobody("/org/propbus/PropBus1/jobs/sleep", "org.propbus.PropBus1.Command.Start", [input])
    }

    func testNobodyCannotTakeEveryExecutionSlotRootStillStartsOne() async throws {
        try await makeSleeper()
        var refused: CommandResult?
        for _ in 0..<8 {
            let result = try await startAsNobody()
            if !result.succeeded { refused = result; break }
        }
        guard let refused else { return XCTFail("nobody took all 8 execution slots (--max-executions 8)") }
        XCTAssertTrue(refused.stderr.contains(Self.limitsExceeded), "\(refused)")
        XCTAssertTrue(refused.stderr.contains("uid \(Self.nobody)"), "the message does not name the uid: \(refused)")
        let id = try await client.start("jobs.sleep")
        try await client.cancel("jobs.sleep", id)
    }

    func testNobodyRunsAtMostItsQuotaOfExecutions() async throws {
        try await restartDaemon(arguments: daemonArguments + ["--quota", "executions=2"])
        try await makeSleeper()
        assertSucceeded(try await startAsNobody())
        assertSucceeded(try await startAsNobody())
        assertOverQuota(try await startAsNobody(), "executions")
    }

    func testAnInputLargerThanTheValueLimitIsRefused() async throws {
        try await makeSleeper()
        let result = try await startAsNobody("<'\(String(repeating: "x", count: 20_000))'>")
        XCTAssertFalse(result.succeeded, "a 20000-byte input over --max-value-size 16384 was accepted: \(result)")
        XCTAssertTrue(result.stderr.contains(Self.limitsExceeded), "\(result)")
        XCTAssertTrue(result.stderr.contains("jobs.sleep") && result.stderr.contains("--max-value-size"), "\(result)")
        let executing = try await client.commandProperty("jobs.sleep", "Executing")
        XCTAssertEqual(executing, .boolean(false), "nothing ran")
    }

    func testStartedCarriesTheInputsSizeNotTheInput() async throws {
        try await client.createCommand("jobs.echo", ["exec": .array(of: .string, [.string("echo"), .string("hi")]),
                                                     "writers": .array(of: .string, [.string("nobody")])])
        let events = try await client.recordExecutions(of: "jobs.echo")
        assertSucceeded(try await gdbusAsNobody("/org/propbus/PropBus1/jobs/echo", "org.propbus.PropBus1.Command.Execute", ["<'hunter2'>"]))
        let signals = await events.wait { !$0.named("Finished").isEmpty }
        guard let started = signals.named("Started").first else { return XCTFail("no Started: \(signals)") }
        XCTAssertFalse("\(started.arguments)".contains("hunter2"), "Started broadcast the input: \(started.arguments)")
        guard case .uint64(let size)? = started.arguments.last else { return XCTFail("Started carries the input's size (t): \(started.arguments)") }
        XCTAssertTrue(size >= 7 && size < 64, "a 7-byte string's marshalled size: \(size)")
    }

    // MARK: Usage

    func testUsageIsShownToEachUidForItselfAndToRootForEveryone() async throws {
        try await client.create("mine.a", "i", default: .int32(0), options: nobodyWriters)
        try await client.create("public.n", "i", default: .int32(3))
        assertSucceeded(try await persistentBindAsNobody(1))
        assertSucceeded(try await persistentBindAsNobody(2))

        let own = try await gdbusAsNobody(PropBusAPI.rootPath, "org.propbus.PropBus1.Manager.GetUsage", ["uint32 \(Self.nobody)"])
        assertSucceeded(own)
        XCTAssertTrue(own.stdout.contains("'bindings': (uint64 2, uint64 64)"), "\(own)")
        assertDenied(try await gdbusAsNobody(PropBusAPI.rootPath, "org.propbus.PropBus1.Manager.GetUsage", ["uint32 0"]), naming: "uid 0")

        let status = try await propctlAsNobody(["status", "--json"])
        assertSucceeded(status)
        XCTAssertTrue(status.stdout.contains("\"uid\":\(Self.nobody)"), "\(status)")
        XCTAssertFalse(status.stdout.contains("\"uid\":0"), "nobody sees only its own usage: \(status)")

        let rootStatus = try await tool(BuildProducts.propctl, ["--address", bus.address, "status"])
        XCTAssertTrue(rootStatus.succeeded, "\(rootStatus)")
        // Piped, a table is tab-separated and has no header: UID, then the quotas by name
        // (bindings, commands, executions, history-bytes, input-bytes, overrides, properties,
        // stored-bytes); the history its bindings' first syncs wrote is charged to it.
        let rows = rootStatus.stdout.split(separator: "\n").map { $0.split(whereSeparator: { $0 == "\t" || $0 == " " }).map(String.init) }
        XCTAssertTrue(rows.contains { row in
            row.count == 9 && Array(row[..<4]) == ["\(Self.nobody)", "2/64", "0/64", "0/16"] && row[4].hasSuffix("/16777216")
                && Array(row[5...]) == ["0/16777216", "0/64", "0/1000", "0/16777216"]
        }, "\(rootStatus.stdout)")
        // Root's own (two properties created, no quota) shows without a limit.
        XCTAssertTrue(rows.contains { $0.first == "0" }, "\(rootStatus.stdout)")
    }

    func testPropertiesCreatedByAUidAreStillCountedAfterARestart() async throws {
        try await client.create("mine.a", "i", default: .int32(0), options: nobodyWriters)
        try await client.create("mine.b", "s", default: .string(""))
        try await client.set("mine.b", .string("abc"))
        try await restartDaemon(arguments: daemonArguments)
        let reply = try await client.call(PropBusAPI.manager, "GetUsage", [.uint32(0)])
        guard case .dictionary(_, _, let entries)? = reply.first else { return XCTFail("GetUsage replied \(reply)") }
        let usage = Dictionary(uniqueKeysWithValues: entries.compactMap { entry in entry.key.stringValue.map { ($0, entry.value) } })
        XCTAssertEqual(usage["properties"], .structure([.uint64(2), .uint64(.max)]), "root's, with no quota: \(usage)")
        XCTAssertEqual(usage["stored-bytes"], .structure([.uint64(8), .uint64(.max)]), "\(usage)")
    }
}
