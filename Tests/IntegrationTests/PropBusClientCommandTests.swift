import DBus
import Foundation
import PropBus
import PropBusClient
import XCTest

/// The client library's commands against the real daemon: execute with a typed result, errors
/// carrying the D-Bus error name, `isEnabled` and `isExecuting` as sequences, start and cancel.
final class PropBusClientCommandTests: ClientLibraryTestCase, @unchecked Sendable {

    private func shell(_ script: String) -> DBusValue {
        .array(of: .string, ["/bin/sh", "-c", script].map { .string($0) })
    }

    func testExecuteReturnsTheResultAndFailuresCarryTheErrorName() async throws {
        try await client.createCommand("vm.echo", ["exec": shell(#"printf 'got %s' "$PROPBUS_INPUT""#), "persistent": .boolean(false)])
        try await client.createCommand("vm.fail", ["exec": shell("echo boom >&2; exit 3"), "persistent": .boolean(false)])
        let echo = library.command("vm.echo", input: String.self, output: String.self)
        let result = try await echo.execute("cats")
        XCTAssertEqual(result, "got cats")
        do {
            _ = try await library.command("vm.fail").execute("x")
            XCTFail("a failing command returned")
        } catch {
            XCTAssertEqual(error.name, PropBusClientError.Name.executionFailed, "\(error)")
        }
    }

    func testIsEnabledFollowsEnabledWhenAndADisabledCommandIsNotEnabled() async throws {
        try await client.create("flags.go", "b", default: .boolean(false))
        try await client.createCommand("vm.run", ["exec": shell("true"), "enabled_when": .string("flags.go"),
                                                  "persistent": .boolean(false)])
        let run = library.command("vm.run")
        let enabled = StreamRecorder(run.isEnabled)
        await enabled.wait { $0 == [false] }
        XCTAssertEqual(enabled.elements, [false])
        do {
            _ = try await run.execute("")
            XCTFail("a disabled command ran")
        } catch {
            XCTAssertEqual(error.name, PropBusClientError.Name.notEnabled, "\(error)")
        }
        try await client.set("flags.go", .boolean(true))
        let seen = await enabled.wait { $0.last == true }
        XCTAssertEqual(seen, [false, true])
    }

    func testIsExecutingDrivesASpinnerAcrossStartAndCancel() async throws {
        try await client.createCommand("vm.slow", ["exec": shell("sleep 30"), "persistent": .boolean(false)])
        let slow = library.command("vm.slow")
        let executing = StreamRecorder(slow.isExecuting)
        await executing.wait { $0 == [false] }
        let id = try await slow.start("")
        await executing.wait { $0.last == true }
        try await slow.cancel(id)
        let seen = await executing.wait { $0.count == 3 }
        XCTAssertEqual(seen, [false, true, false])
        do {
            try await slow.cancel(id)
            XCTFail("cancelling an ended execution succeeded")
        } catch {
            XCTAssertEqual(error.name, DBusError.Name.invalidArgs, "\(error)")
        }
    }

    func testCancellingTheTaskAwaitingExecuteCancelsTheExecution() async throws {
        try await client.createCommand("vm.slow", ["exec": shell("sleep 20"), "persistent": .boolean(false)])
        let slow = library.command("vm.slow")
        let executing = StreamRecorder(slow.isExecuting)
        await executing.wait { $0 == [false] }
        let run = Task { try await slow.execute("") }
        await executing.wait { $0.last == true }
        let clock = ContinuousClock()
        let cancelledAt = clock.now
        run.cancel()
        let outcome = await run.result
        XCTAssertLessThan(clock.now - cancelledAt, .seconds(10), "the await ended with the cancellation, not the execution")
        switch outcome {
        case .success(let result): XCTFail("a cancelled execute returned \(result)")
        case .failure(let error): XCTAssertEqual((error as? PropBusClientError)?.name, PropBusClientError.Name.cancelled, "\(error)")
        }
        let seen = await executing.wait { $0.count == 3 }
        XCTAssertEqual(seen, [false, true, false], "the execution was cancelled on the daemon")
    }

    func testClosingTheClientCancelsTheExecutionsItWaitsFor() async throws {
        try await client.createCommand("vm.slow", ["exec": shell("sleep 30"), "persistent": .boolean(false)])
        let watched = library.command("vm.slow")
        let recorded = StreamRecorder(await watched.subscribedExecutions().map { event -> String in
            switch event {
            case .started: "started"
            case .finished: "finished"
            case .failed(_, let error): "failed \(error.name)"
            }
        })
        let executing = StreamRecorder(watched.isExecuting)
        await executing.wait { $0 == [false] }
        let other = try await PropBusClient.connect(.address(bus.address))
        let run = Task { try await other.command("vm.slow").execute("") }
        // Seen by this client: the closing one may not have the Start's answer yet.
        await executing.wait { $0.last == true }
        other.close()
        _ = await run.result
        let seen = await recorded.wait { $0.count == 2 }
        XCTAssertEqual(seen, ["started", "failed \(PropBusClientError.Name.cancelled)"])
    }
}
