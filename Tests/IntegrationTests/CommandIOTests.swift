import DBus
import Foundation
import PropBus
import XCTest

/// The daemon's execution I/O: running executions never hold up another one, and a killed
/// program ends its execution as soon as it is gone.
final class CommandIOTests: DaemonTestCase {
    private func argv(_ script: String) -> DBusValue { .array(of: .string, [.string("sh"), .string("-c"), .string(script)]) }

    /// Starts `count` executions of a concurrent `sleep 30`, runs `echo hi` behind them, and
    /// checks that echo answered while every sleep still ran.
    private func assertEchoAnswersBehind(_ count: Int, file: StaticString = #filePath, line: UInt = #line) async throws {
        try await client.createCommand("jobs.sleep", ["exec": .array(of: .string, [.string("sleep"), .string("30")]), "concurrent": .boolean(true)])
        try await client.createCommand("jobs.echo", ["exec": .array(of: .string, [.string("echo"), .string("hi")])])
        var ids: [UInt64] = []
        for _ in 0..<count { ids.append(try await client.start("jobs.sleep")) }
        let echoed = try await client.execute("jobs.echo")
        XCTAssertEqual(echoed, .string("hi"), file: file, line: line)
        // Read after echo's reply: the sleeps were all still running when it came.
        let running = try await client.commandProperty("jobs.sleep", "Executions")
        XCTAssertEqual(running, .uint32(UInt32(count)), "echo did not wait for a sleep to end", file: file, line: line)
        for id in ids { try await client.cancel("jobs.sleep", id) }
        let idle = await eventually(timeout: 10) { (try? await self.client.commandProperty("jobs.sleep", "Executions")) == .uint32(0) }
        XCTAssertTrue(idle, "the cancelled sleeps ended", file: file, line: line)
    }

    func testEchoAnswersWhileEightSleepsRun() async throws {
        try await assertEchoAnswersBehind(8)
    }

    func testEchoAnswersWhileSixtySleepsRun() async throws {
        try await assertEchoAnswersBehind(60)
    }

    func testACancelledProgramThatIgnoresTermEndsWhenItIsKilled() async throws {
        let pids = try makeTemporaryDirectory(prefix: "cmd").appendingPathComponent("pids")
        // Both the leader and its child ignore SIGTERM (an ignored signal stays ignored over exec).
        try await client.createCommand("jobs.stubborn", ["exec": argv("trap '' TERM; sleep 30 & echo $$ $! > '\(pids.path)'; wait")])
        // Other executions running meanwhile must not delay the kill nor the reaping.
        try await client.createCommand("jobs.sleep", ["exec": .array(of: .string, [.string("sleep"), .string("30")]), "concurrent": .boolean(true)])
        for _ in 0..<20 { _ = try await client.start("jobs.sleep") }
        let events = try await client.recordExecutions(of: "jobs.stubborn")
        let changes = try await client.recordChanges(ofGroup: "jobs.stubborn")
        let id = try await client.start("jobs.stubborn")
        let written = await eventually { ((try? String(contentsOf: pids, encoding: .utf8)) ?? "").hasSuffix("\n") }
        XCTAssertTrue(written, "the program started")
        let processes = try String(contentsOf: pids, encoding: .utf8).split(separator: " ").compactMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        XCTAssertEqual(processes.count, 2)
        try await client.cancel("jobs.stubborn", id)
        // The kill comes after the 2 s grace; the old engine let Executing go false only some
        // 10 s after the cancel. The bound is what separates the two, not a measurement.
        let ended = await changes.wait(timeout: 6) { signals in
            signals.contains { $0.arguments.first?.stringValue == Client.commandInterface && $0.changed["Executing"] == .boolean(false) }
        }
        XCTAssertTrue(ended.contains { $0.changed["Executing"] == .boolean(false) }, "Executing went false within the bound: \(ended)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: "/proc/\(processes[0])"), "the leader was reaped before Executing went false")
        XCTAssertFalse(CommandFailureTests.isRunning(processes[1]), "its child was killed with it")
        let failed = await events.wait { !$0.named("Failed").isEmpty }
        XCTAssertEqual(failed.named("Failed").first?.arguments[1], .string(PropBusAPI.error("Cancelled")))
    }

    func testExecutionsDoNotOutliveADaemonThatLostItsBus() async throws {
        let pids = try makeTemporaryDirectory(prefix: "cmd").appendingPathComponent("pids")
        try await client.createCommand("jobs.sleep", ["exec": argv("echo $$ > '\(pids.path)'; exec sleep 30")])
        _ = try await client.start("jobs.sleep")
        let written = await eventually { ((try? String(contentsOf: pids, encoding: .utf8)) ?? "").hasSuffix("\n") }
        XCTAssertTrue(written, "the program started")
        let pid = try XCTUnwrap(Int32(String(contentsOf: pids, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)))
        await bus.crash()
        let exited = await daemon.process.waitForExit(timeout: 10)
        XCTAssertEqual(exited?.status, 1, "propbusd exits when its bus is gone: \(daemon.stderr)")
        let gone = await eventually { !CommandFailureTests.isRunning(pid) }
        XCTAssertTrue(gone, "the execution's program \(pid) was left running")
        if !gone { kill(pid, SIGKILL) }
    }
}
