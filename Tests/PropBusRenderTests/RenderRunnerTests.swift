import DBusValues
import Dispatch
import Foundation
import Glibc
import PropBus
import PropBusExec
import SystemKit
import XCTest

@testable import PropBusRender

/// A host from a table, on a queue of its own, recording what the runner publishes.
final class TableHost: RenderHost, @unchecked Sendable {
    // Safety: touched on `queue` only (the tests hop there with sync).
    var table = TableValues()
    var revision: UInt64 = 1
    var published: [String: RenderStatus] = [:]
    var lines: [String] = []

    func renderValue(of key: String) -> (value: DBusValue, secret: Bool)? { table.renderValue(of: key) }
    func renderNames(inGroup group: String) -> [String] { table.renderNames(inGroup: group) }
    var renderRevision: UInt64 { revision }
    func publishRenderStatus(_ status: RenderStatus, of name: String) { published[name] = status }
    func removeRenderStatus(of name: String) { published[name] = nil }
    func logRender(_ line: String) { lines.append(line) }
}

/// Keeps what renders installed, as a confirmed apply would.
final class InstallRecorder: RenderInstallRecorder, @unchecked Sendable {
    // Safety: touched on the runner's queue only.
    var records: [InstalledRender] = []
    func renderInstalled(_ record: InstalledRender) { records.append(record) }
}

/// The runner against a table host, on real files with real programs: the seam a confirmed
/// apply uses, runs asked for, and the bound on programs at once.
final class RenderRunnerTests: XCTestCase {
    private var directory: String!
    private let queue = DispatchQueue(label: "render-tests")
    private let host = TableHost()
    private var runner: RenderRunner!
    private let recorder = InstallRecorder()

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("propbus-runner-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        runner = queue.sync { RenderRunner(host: host, queue: queue, loop: CommandIOLoop(capacity: 16)) }
        queue.sync { runner.installRecorder = recorder }
    }

    override func tearDownWithError() throws {
        let stopped = DispatchSemaphore(value: 0)
        queue.sync { runner.stop { stopped.signal() } }
        stopped.wait()
        try? FileManager.default.removeItem(atPath: directory)
    }

    private func declaration(_ name: String, _ template: String, check: [String] = [], reload: [String] = []) throws -> RenderDeclaration {
        var json: [String: Any] = ["template_text": template, "destination": directory + "/" + name + ".conf"]
        if !check.isEmpty { json["check"] = check }
        if !reload.isEmpty { json["reload"] = reload }
        let text = String(decoding: try JSONSerialization.data(withJSONObject: json), as: UTF8.self)
        return try RenderDeclaration(name: name, json: JSONValue.parse(text), modelFile: directory + "/model.json")
    }

    private func set(_ key: String, _ value: DBusValue) {
        queue.sync {
            host.table.values[key] = value
            host.revision += 1
            runner.noteChanged([key])
        }
    }

    /// Waits until `name`'s published state is `state` at `revision` or later.
    private func waitFor(_ name: String, _ state: RenderStatus.State, revision: UInt64 = 0, file: StaticString = #filePath, line: UInt = #line) {
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            let status = queue.sync { host.published[name] }
            if status?.state == state, (status?.revision ?? 0) >= revision || state != .ok { return }
            usleep(5000)
        }
        XCTFail("\(name): \(String(describing: queue.sync { host.published[name] }))", file: file, line: line)
    }

    private func contents(_ name: String) -> String? { try? String(contentsOfFile: directory + "/" + name + ".conf", encoding: .utf8) }

    func testARollbackPutsBackWhatARenderReplacedAndReloads() throws {
        let log = directory + "/reloads"
        host.table.values["a.b"] = .string("one")
        let render = try declaration("site", "{{ a.b }}\n", reload: ["sh", "-c", "cat \"$1\" >> \(log)", "sh", "{{file}}"])
        queue.sync { runner.load([render]) }
        waitFor("site", .ok, revision: 1)
        set("a.b", .string("two"))
        waitFor("site", .ok, revision: 2)
        XCTAssertEqual(contents("site"), "two\n")
        let record = try XCTUnwrap(queue.sync { recorder.records.last })
        XCTAssertEqual(record.previous?.bytes, Array("one\n".utf8))
        XCTAssertEqual(record.revision, 2)

        let done = DispatchSemaphore(value: 0)
        try queue.sync { try runner.rollBack(record) { _ in done.signal() } }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(contents("site"), "one\n")
        XCTAssertEqual(try String(contentsOfFile: log, encoding: .utf8), "one\ntwo\none\n")
        XCTAssertTrue(queue.sync { host.published["site"]?.message.hasPrefix("rolled back") } ?? false)
    }

    func testARunAskedForRendersAtOnceAndAnswersWithItsOutcome() throws {
        host.table.values["a.b"] = .string("x")
        queue.sync { runner.load([try! declaration("site", "{{ a.b }}\n", check: ["false"])]) }
        waitFor("site", .checkFailed)
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var outcome: RenderStatus?
        try queue.sync { try runner.run("site") { outcome = $0; done.signal() } }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(outcome?.state, .checkFailed)
        XCTAssertThrowsError(try queue.sync { try runner.run("nope") { _ in } })
    }

    func testAtMostEightRunsAreInFlightAndTheOthersWaitTheirTurn() throws {
        let running = directory + "/running", most = directory + "/most"
        try FileManager.default.createDirectory(atPath: running, withIntermediateDirectories: true)
        // Each check is a file in `running` while it runs; how many there are is noted.
        let check = ["sh", "-c", "f=$(mktemp -p \(running)); ls \(running) | wc -l >> \(most); sleep 0.3; rm $f"]
        var renders: [RenderDeclaration] = []
        for index in 0..<12 {
            host.table.values["a.k\(index)"] = .int32(Int32(index))
            renders.append(try declaration("r\(index)", "{{ a.k\(index) }}\n", check: check))
        }
        queue.sync { runner.load(renders) }
        for index in 0..<12 { waitFor("r\(index)", .ok) }
        let seen = try String(contentsOfFile: most, encoding: .utf8).split(separator: "\n").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        XCTAssertEqual(seen.count, 12)
        XCTAssertLessThanOrEqual(seen.max() ?? 0, RenderRunner.maximumConcurrentRuns)
        XCTAssertGreaterThan(seen.max() ?? 0, 1, "runs overlap")
    }
}
