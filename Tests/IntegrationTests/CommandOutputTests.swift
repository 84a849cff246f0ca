import DBus
import Foundation
import PropBus
import XCTest

/// An exec command's output is text: UTF-8 without NUL. Anything else fails the execution with
/// `InvalidOutput`, announced by `Failed` like every other failure, so no waiter hangs.
extension CommandFailureTests {
    func testANulByteInStdoutIsInvalidOutputWithTheOffset() async throws {
        try await client.createCommand("jobs.nul", ["exec": argv(#"printf 'a\0b'"#)])
        try await assertFailsOnce("jobs.nul", PropBusAPI.error("InvalidOutput"),
                                  containing: ["command jobs.nul wrote a NUL byte at offset 1 of its stdout", "UTF-8 text"]) {
            _ = try await self.client.execute("jobs.nul")
        }
    }

    func testInvalidUTF8InStdoutIsInvalidOutputWithTheOffset() async throws {
        try await client.createCommand("jobs.latin1", ["exec": argv(#"printf 'ok\377'"#)])
        try await assertFailsOnce("jobs.latin1", PropBusAPI.error("InvalidOutput"),
                                  containing: ["command jobs.latin1 wrote invalid UTF-8 at offset 2 of its stdout", "UTF-8 text"]) {
            _ = try await self.client.execute("jobs.latin1")
        }
        // Valid multi-byte text is still a plain result.
        try await client.createCommand("jobs.text", ["exec": argv("printf 'caf\\303\\251 \\342\\202\\254'")])
        let text = try await client.execute("jobs.text")
        XCTAssertEqual(text, .string("café €"))
    }

    func testNulAndInvalidUTF8OnStderrStillGiveExecutionFailed() async throws {
        try await client.createCommand("jobs.noisy", ["exec": argv(#"printf 'bad\0news\377' >&2; exit 4"#)])
        try await assertFailsOnce("jobs.noisy", PropBusAPI.error("ExecutionFailed"), containing: ["jobs.noisy", "status 4", "bad", "news"]) {
            _ = try await self.client.execute("jobs.noisy")
        }
    }

    func testPropctlExecReportsInvalidOutputAndExitsNonZero() async throws {
        try await client.createCommand("jobs.nul", ["exec": argv(#"printf 'a\0b'"#)])
        try await client.createCommand("jobs.latin1", ["exec": argv(#"printf '\377'"#)])
        for (key, fragment) in [("jobs.nul", "wrote a NUL byte at offset 1 of its stdout"), ("jobs.latin1", "wrote invalid UTF-8 at offset 0 of its stdout")] {
            let result = try await tool(BuildProducts.propctl, ["--address", bus.address, "exec", key], timeout: 15)
            XCTAssertFalse(result.timedOut, "propctl exec \(key) did not hang: \(result)")
            XCTAssertEqual(result.status, 1, "\(result)")
            XCTAssertTrue(result.stderr.contains(PropBusAPI.error("InvalidOutput")) && result.stderr.contains(fragment), result.stderr)
        }
    }
}
