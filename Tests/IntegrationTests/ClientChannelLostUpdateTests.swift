import DBus
import Foundation
import XCTest

/// `propctl bind --exec/--stdio` loses nothing. After every Set completes the
/// endpoint's current value is compared with the bus and pushed again if they differ; and
/// `--framing json` carries values with newlines.
final class ClientChannelLostUpdateTests: DaemonTestCase, @unchecked Sendable {
    private var binds: [ChildProcess] = []
    private var directory: URL!

    override func setUp() async throws {
        try await super.setUp()
        directory = try makeTemporaryDirectory(prefix: "pbit-lost")
    }

    override func tearDown() async throws {
        for bind in binds { await bind.stop() }
        if let directory { try? FileManager.default.removeItem(at: directory) }
        try await super.tearDown()
    }

    private func script(_ name: String, _ body: String) throws -> String {
        let path = directory.appendingPathComponent(name).path
        try ("#!/bin/sh\n" + body).write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o755)
        return path
    }

    private func bind(_ arguments: [String]) throws -> ChildProcess {
        let process = try ChildProcess(BuildProducts.propctl, ["--address", bus.address, "bind"] + arguments, environment: bus.environment)
        binds.append(process)
        return process
    }

    func testCoprocessAnsweringABusChangeWithTwoQuickLinesLeavesTheBusAtItsLastLine() async throws {
        try await client.create("demo.s", "s", default: .string("v0"))
        let log = directory.appendingPathComponent("seen").path
        // Answers the bus value v1 with "other", then at once "v1" again.
        let coprocess = try script("answer", """
            while IFS= read -r line; do
              echo "$line" >> \(log)
              if [ "$line" = v1 ]; then echo other; echo v1; fi
            done
            """)
        let process = try bind(["demo.s", "--exec", coprocess, "--verbose"])
        let started = await eventually(timeout: 10) { ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("v0") }
        XCTAssertTrue(started, "coprocess never got the initial value; stderr: \(process.stderr)")
        try await client.set("demo.s", .string("v1"))
        // The barrier: the binding dealt with the coprocess's last line. If it sent "other", its
        // own Set of v1 must follow and be answered (the lost update stopped at "other" on the
        // bus); if it read both lines at once, it found v1 on the bus already and sent nothing.
        // "sending" is said when a Set leaves, so it is in stderr before any later decision.
        let settled = await eventually(timeout: 10) {
            let said = process.stderr
            if said.contains(#"sending "other""#) { return said.contains(#"set demo.s to "v1""#) }
            return said.contains(#"shows "v1", which the bus holds"#)
        }
        let final = try await client.get("demo.s")
        XCTAssertTrue(settled && final == .string("v1"), "the coprocess said v1 last, the bus holds \(final); stderr: \(process.stderr)")
    }

    func testJSONFramingCarriesValuesWithNewlinesBothWays() async throws {
        try await client.create("demo.text", "s", default: .string("one\ntwo"))
        let log = directory.appendingPathComponent("seen").path
        let coprocess = try script("json", """
            while IFS= read -r line; do
              printf '%s\\n' "$line" >> \(log)
              if [ "$line" = '"go"' ]; then printf '%s\\n' '"three\\nfour"'; fi
            done
            """)
        let process = try bind(["demo.text", "--framing", "json", "--exec", coprocess])
        let started = await eventually(timeout: 10) { ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains(#""one\ntwo""#) }
        XCTAssertTrue(started, "expected one JSON line; log: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? ""); stderr: \(process.stderr)")
        try await client.set("demo.text", .string("go"))
        let back = await eventually(timeout: 10) { (try? await self.client.get("demo.text")) == .string("three\nfour") }
        XCTAssertTrue(back, "stderr: \(process.stderr)")
    }
}
