import DBus
import Foundation
import XCTest

/// `ListBindings` and `ListUnclaimed` answer `LimitsExceeded` past the message limit; their
/// paged forms (`ListBindingsPage`, `ListUnclaimedPage`) take a prefix and a cursor, and
/// `propctl bindings` and `propctl prune` page, so they work whatever the size.
final class ListingPagingTests: DaemonTestCase, @unchecked Sendable {
    override var daemonArguments: [String] { ["--max-message-size", "65536", "--max-bindings-per-client", "1000"] }

    /// A key name long enough that 150 rows of them pass 64 KiB.
    private func longKey(_ group: String, _ index: Int) -> String {
        "\(group).\(String(repeating: "n", count: 180))\(index)"
    }

    private func propctl(_ arguments: [String]) async throws -> CommandResult {
        try await tool(BuildProducts.propctl, ["--address", bus.address] + arguments, timeout: 30)
    }

    private func assertReplyTooLarge(_ member: String, file: StaticString = #filePath, line: UInt = #line) async {
        do {
            _ = try await client.call(PropBusAPI.manager, member)
            XCTFail("\(member) fit in one message: the test does not reach the limit", file: file, line: line)
        } catch {
            XCTAssertTrue("\(error)".contains("LimitsExceeded"), "\(error)", file: file, line: line)
            XCTAssertTrue("\(error)".contains("\(member)Page"), "the error does not say how to ask for less: \(error)", file: file, line: line)
        }
    }

    /// Every page of `member` for `prefix`, `limit` rows at most per page.
    private func pages(_ member: String, prefix: String, limit: UInt32, start: DBusValue) async throws -> [[DBusValue]] {
        var result: [[DBusValue]] = []
        var cursor = start
        while true {
            let reply = try await client.call(PropBusAPI.manager, member, [.string(prefix), cursor, .uint32(limit)])
            guard reply.count == 2, case .array(_, let rows) = reply[0] else { throw TestSetupError("\(member) replied \(reply)") }
            result.append(rows)
            if reply[1] == start { return result }
            XCTAssertFalse(rows.isEmpty, "a page with a cursor after it is empty")
            cursor = reply[1]
            if result.count > 1000 { throw TestSetupError("\(member) never ends") }
        }
    }

    func testListBindingsPagesThroughMoreBindingsThanFitInOneMessage() async throws {
        let count = 150
        for index in 0..<count {
            try await client.create(longKey("pa", index), "i", default: .int32(0))
            try await client.create(longKey("pb", index), "i", default: .int32(0))
            try await client.call(PropBusAPI.manager, "Bind", [.string(longKey("pa", index)), .string(longKey("pb", index)),
                                                               .vardict(["persistent": .boolean(true)])])
        }
        try await client.create("other.a", "i", default: .int32(0))
        try await client.create("other.b", "i", default: .int32(0))
        try await client.call(PropBusAPI.manager, "Bind", [.string("other.a"), .string("other.b"), .vardict(["persistent": .boolean(true)])])
        await assertReplyTooLarge("ListBindings")

        // No limit: the daemon ends each page before the message limit.
        let all = try await pages("ListBindingsPage", prefix: "", limit: 0, start: .uint64(0))
        XCTAssertGreaterThan(all.count, 1, "one page held everything")
        let rows = all.flatMap { $0 }
        let keys = rows.compactMap { row -> String? in
            guard case .structure(let fields) = row, fields.count == 4 else { return nil }
            return fields[1].stringValue
        }
        XCTAssertEqual(keys.count, count + 1)
        XCTAssertEqual(Set(keys).count, count + 1, "a binding came twice")
        // A limit: pages of at most that many.
        let small = try await pages("ListBindingsPage", prefix: "", limit: 7, start: .uint64(0))
        XCTAssertTrue(small.allSatisfy { $0.count <= 7 })
        XCTAssertEqual(small.flatMap { $0 }.count, count + 1)
        // A prefix: the bindings with either end under it.
        let other = try await pages("ListBindingsPage", prefix: "other.", limit: 0, start: .uint64(0)).flatMap { $0 }
        XCTAssertEqual(other.count, 1)
        let toB = try await pages("ListBindingsPage", prefix: "other.b", limit: 0, start: .uint64(0)).flatMap { $0 }
        XCTAssertEqual(toB.count, 1)

        let listed = try await propctl(["bindings"])
        XCTAssertTrue(listed.succeeded, "\(listed)")
        XCTAssertEqual(listed.stdout.split(separator: "\n").count, count + 1, "every binding (no header off a terminal)")
        let narrowed = try await propctl(["bindings", "other."])
        XCTAssertTrue(narrowed.succeeded, "\(narrowed)")
        XCTAssertEqual(narrowed.stdout.split(separator: "\n").count, 1, narrowed.stdout)
        XCTAssertTrue(narrowed.stdout.contains("other.a"), narrowed.stdout)
    }

    func testListUnclaimedPagesAndPruneDeletesMoreValuesThanFitInOneMessage() async throws {
        let count = 100
        let model = bus.directory.appendingPathComponent("big.json")
        // One group each: a group's GetAll must fit in one message too.
        let groups = (0..<count).map { #""big.g\#($0)": {"properties": {"v": {"type": "s", "default": ""}}}"# }.joined(separator: ", ")
        try #"{"groups": {\#(groups)}}"#.write(to: model, atomically: true, encoding: .utf8)
        try await restartDaemon(arguments: daemonArguments + ["--model", model.path])
        let text = String(repeating: "x", count: 1000)
        for index in 0..<count { try await client.set("big.g\(index).v", .string(text)) }
        // Without the file the values stay, unclaimed.
        try await restartDaemon(arguments: daemonArguments)
        await assertReplyTooLarge("ListUnclaimed")

        let all = try await pages("ListUnclaimedPage", prefix: "", limit: 0, start: .string(""))
        XCTAssertGreaterThan(all.count, 1, "one page held everything")
        let keys = all.flatMap { $0 }.compactMap { row -> String? in
            guard case .structure(let fields) = row, fields.count == 2 else { return nil }
            return fields[0].stringValue
        }
        XCTAssertEqual(keys, (0..<count).map { "big.g\($0).v" }.sorted())
        let narrowed = try await pages("ListUnclaimedPage", prefix: "big.g9", limit: 0, start: .string("")).flatMap { $0 }
        XCTAssertEqual(narrowed.count, 11, "big.g9 and big.g90 … big.g99")

        let dry = try await propctl(["prune"])
        XCTAssertTrue(dry.succeeded, "\(dry)")
        XCTAssertTrue(dry.stdout.contains("\(count) stored values without a definition"), dry.stdout)
        let pruned = try await propctl(["prune", "--yes"])
        XCTAssertTrue(pruned.succeeded, "\(pruned)")
        XCTAssertTrue(pruned.stdout.contains("deleted \(count) stored values"), pruned.stdout)
        let left = try await pages("ListUnclaimedPage", prefix: "", limit: 0, start: .string("")).flatMap { $0 }
        XCTAssertEqual(left.count, 0)
    }
}
