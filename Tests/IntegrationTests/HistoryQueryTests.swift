import DBus
import Foundation
import XCTest

/// `ListHistory`'s filters and cursor, and `Revert`'s edges, as a client sees them: a filter entry
/// it does not know (or of the wrong type) is refused naming it, as `RevertRange` refuses a range
/// field; a cursor past every revision reads nothing; a revert to a revision not reached yet
/// fails; and reverting a change of a key that read a site default makes it read the default
/// again, following the site layer from then on.
final class HistoryQueryTests: DaemonTestCase, @unchecked Sendable {
    override var daemonArguments: [String] { layerDirectoryArguments }

    private func listHistory(_ prefix: String, after: UInt64 = 0, _ filter: [String: DBusValue] = [:]) async throws -> [DBusValue] {
        try await client.call(PropBusAPI.manager, "ListHistory", [.string(prefix), .uint64(after), .uint32(0), .vardict(filter)])
    }

    private func assertInvalidArgs(_ filter: [String: DBusValue], naming words: [String], file: StaticString = #filePath, line: UInt = #line) async {
        do {
            let reply = try await listHistory("", filter)
            XCTFail("ListHistory accepted \(filter): \(reply)", file: file, line: line)
        } catch let error as DBusError {
            XCTAssertEqual(error.name, PropBusAPI.standard("InvalidArgs"), error.message, file: file, line: line)
            for word in words { XCTAssertTrue(error.message.contains(word), "\(error.message) does not say \(word)", file: file, line: line) }
        } catch {
            XCTFail("\(error)", file: file, line: line)
        }
    }

    func testAnUnknownOrMistypedFilterEntryIsRefusedNamingItAndTheTypeExpected() async throws {
        try await client.create("app.x", "i", default: .int32(0))
        try await client.set("app.x", .int32(1))
        await assertInvalidArgs(["untill": .uint64(1)], naming: ["untill", "until"])
        await assertInvalidArgs(["uid": .int32(0)], naming: ["uid", "'u'", "'i'"])
        await assertInvalidArgs(["since_time": .uint64(0)], naming: ["since_time", "'x'"])
        await assertInvalidArgs(["denied": .string("yes")], naming: ["denied", "'b'"])
        // The known entries, well typed, are still taken.
        let reply = try await listHistory("app.", ["uid": .uint32(0), "until": .uint64(.max), "since_time": .int64(0)])
        XCTAssertEqual(reply.count, 2)
    }

    func testACursorPastEveryRevisionReadsNothing() async throws {
        try await client.create("app.x", "i", default: .int32(0))
        try await client.set("app.x", .int32(1))
        for after in [UInt64(1) << 63, UInt64.max] {
            let reply = try await listHistory("", after: after)
            guard case .array(_, let rows)? = reply.first else { return XCTFail("\(reply)") }
            XCTAssertTrue(rows.isEmpty, "after \(after): \(rows)")
            XCTAssertEqual(reply.last, .uint64(0))
        }
    }

    func testRevertToARevisionNotReachedYetFailsSayingSo() async throws {
        try await client.create("app.x", "i", default: .int32(0))
        try await client.set("app.x", .int32(1))
        let now = try await client.getWithRevision("app.x").revision
        do {
            _ = try await client.call(PropBusAPI.manager, "Revert", [.array(of: .string, [.string("app.x")]), .uint64(now + 1000), .uint64(0), .boolean(false)])
            XCTFail("a revert to a future revision succeeded")
        } catch let error as DBusError {
            XCTAssertEqual(error.name, PropBusAPI.standard("InvalidArgs"), error.message)
            XCTAssertTrue(error.message.contains("\(now + 1000)") && error.message.contains("\(now)"), error.message)
        }
    }

    func testRevertingASetOfAKeyThatReadTheSiteDefaultLeavesItFollowingTheSiteLayer() async throws {
        try await client.create("app.volume", "i", default: .int32(50))
        try writeLayerFile(configDirectory, "defaults.d", "10-site.json", #"{"app.volume": 30}"#)
        let first = try await propctlLayers(["reload"])
        XCTAssertTrue(first.succeeded, "\(first)")
        try await client.set("app.volume", .int32(70))
        let rows = try await listHistory("app.volume")
        guard case .array(_, let entries)? = rows.first, let set = entries.last?.stringKeyedEntries?.mapValues(\.unwrappingVariant),
              case .uint64(let change)? = set["change"] else { return XCTFail("\(rows)") }
        _ = try await client.call(PropBusAPI.manager, "Revert", [.array(of: .string, []), .uint64(0), .uint64(change), .boolean(false)])
        let reverted = try await client.get("app.volume")
        XCTAssertEqual(reverted, .int32(30))
        // The site default moves: a key that reads it again follows.
        try writeLayerFile(configDirectory, "defaults.d", "10-site.json", #"{"app.volume": 35}"#)
        let second = try await propctlLayers(["reload"])
        XCTAssertTrue(second.succeeded, "\(second)")
        let followed = try await client.get("app.volume")
        XCTAssertEqual(followed, .int32(35), "the revert pinned the site default in the user layer")

        // The same through a revert to a revision: before the Set, the key was unset.
        try await client.set("app.volume", .int32(80))
        let before = try await client.getWithRevision("app.volume").revision - 1
        _ = try await client.call(PropBusAPI.manager, "Revert", [.array(of: .string, [.string("app.volume")]), .uint64(before), .uint64(0), .boolean(false)])
        try writeLayerFile(configDirectory, "defaults.d", "10-site.json", #"{"app.volume": 36}"#)
        let third = try await propctlLayers(["reload"])
        XCTAssertTrue(third.succeeded, "\(third)")
        let again = try await client.get("app.volume")
        XCTAssertEqual(again, .int32(36))
    }
}
