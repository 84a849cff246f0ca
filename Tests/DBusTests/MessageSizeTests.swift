import Foundation
import XCTest

@testable import DBus

/// No message the tree sends may exceed ``ObjectTree/maximumMessageSize``: a
/// bus disconnects a sender whose message is above its `max_message_size`.
final class MessageSizeTests: XCTestCase {
    private final class State: @unchecked Sendable { // confined to the service's queue
        var big = String(repeating: "x", count: 10_000)
        var oversized: [String] = []
    }

    func testOversizedRepliesAndSignalsAreReplacedNotSent() async throws {
        let bus = try TestBus.start(maxMessageSize: 16384)
        defer { bus.stop() }
        let service = try await bus.connect()
        let client = try await bus.connect()
        let state = State()
        let received = SignalLog()
        _ = await onQueue(client) { client.addSignalHandler(matching: nil) { received.append($0) } }
        try await client.addMatch(MatchRule(sender: service.uniqueName))
        let tree = await onQueue(service) { () -> ObjectTree in
            let tree = ObjectTree(connection: service)
            tree.maximumMessageSize = 8192
            tree.onOversizedSignal = { state.oversized.append($0) }
            tree.addObjectManager(at: "/m")
            tree.export(ExportedObject {
                [InterfaceDescription("org.propbus.Test", properties: .fixed([
                    PropertyDescription("Big", type: .string, get: { .string(state.big) }),
                    PropertyDescription("Small", type: .int32, get: { .int32(1) }),
                ]))]
            }, at: "/m/o")
            service.scheduleRound()
            return tree
        }
        // InterfacesAdded would carry 10 kB: it goes out without values, then every property is invalidated.
        let announced = await received.wait { $0.contains { $0.member == "PropertiesChanged" } }
        XCTAssertEqual(announced.map(\.member), ["InterfacesAdded", "PropertiesChanged"])
        XCTAssertEqual(announced.last?.invalidated.sorted(), ["Big", "Small"])
        // A reply too big becomes LimitsExceeded; the connection stays.
        do {
            _ = try await client.call(destination: service.uniqueName, path: "/m/o", interface: "org.freedesktop.DBus.Properties",
                                      member: "GetAll", arguments: [.string("org.propbus.Test")])
            XCTFail("a 10 kB GetAll went out above an 8 kB limit")
        } catch {
            XCTAssertEqual(error.name, DBusError.Name.limitsExceeded)
            XCTAssertTrue(error.message.contains("GetAll"), error.message)
        }
        // A PropertiesChanged too big carries the names only.
        await onQueue(service) {
            tree.noteChange(path: "/m/o", interface: "org.propbus.Test", property: "Big", oldValue: .string(state.big))
            state.big = String(repeating: "y", count: 10_000)
            service.scheduleRound()
        }
        let changed = await received.wait { $0.count >= 3 }
        XCTAssertEqual(changed.last?.member, "PropertiesChanged")
        XCTAssertEqual(changed.last?.invalidated, ["Big"])
        XCTAssertEqual(changed.last?.changedCount, 0)
        // Any other signal too big is left out; a later small one still arrives.
        await onQueue(service) {
            tree.emitAtFlush(path: "/m/o", interface: "org.propbus.Test", member: "Huge", [.string(state.big)])
            tree.emitAtFlush(path: "/m/o", interface: "org.propbus.Test", member: "Marker", [])
            service.scheduleRound()
        }
        let all = await received.wait { $0.contains { $0.member == "Marker" } }
        XCTAssertFalse(all.contains { $0.member == "Huge" })
        let reports = await onQueue(service) { state.oversized }
        XCTAssertEqual(reports.count, 3, "\(reports)")
        let peer = try await client.call(destination: service.uniqueName, path: "/m/o", interface: "org.freedesktop.DBus.Peer", member: "Ping")
        XCTAssertEqual(peer.count, 0)
        service.close()
        client.close()
    }

    /// A reply with an array above the protocol's 64 MiB array limit was
    /// refused as one that "would be 9223372036854775807 bytes". It says its real size, and
    /// names the array limit when that is what it passes; built whole or streamed.
    func testAReplyPastTheArrayLimitSaysItsRealSize() async throws {
        let bus = try TestBus.start()
        defer { bus.stop() }
        let service = try await bus.connect()
        let client = try await bus.connect()
        // 65 strings of 1 MiB (one buffer, shared): an array of 65 MiB and a few bytes.
        let chunk = String(repeating: "x", count: 1 << 20)
        let arrayBytes = 65 * (4 + (1 << 20) + 1)
        let tree = await onQueue(service) { () -> ObjectTree in
            let tree = ObjectTree(connection: service)
            tree.export(ExportedObject {
                [InterfaceDescription("org.propbus.Test", methods: [
                    MethodDescription("Whole", out: [("a", .array(.string))]) { _ in
                        .reply([.array(of: .string, Array(repeating: .string(chunk), count: 65))])
                    },
                    MethodDescription("Streamed", out: [("a", .array(.string))]) { _ in
                        .stream(ReplyBody { writer in writer.array(of: "s", alignment: 4) { for _ in 0..<65 { $0.string(chunk) } } })
                    },
                ])]
            }, at: "/o")
            return tree
        }
        func refusal(_ member: String, messageLimit: Int) async throws -> String {
            await onQueue(service) { tree.maximumMessageSize = messageLimit }
            do {
                _ = try await client.call(destination: service.uniqueName, path: "/o", interface: "org.propbus.Test", member: member)
                XCTFail("\(member): a 65 MiB array went out")
                return ""
            } catch {
                XCTAssertEqual(error.name, DBusError.Name.limitsExceeded, error.message)
                XCTAssertFalse(error.message.contains("\(Int.max)"), error.message)
                return error.message
            }
        }
        for member in ["Whole", "Streamed"] {
            // Above the message limit too: the size the reply would have had.
            let overMessage = try await refusal(member, messageLimit: 32 << 20)
            XCTAssertTrue(overMessage.contains("more than the \(32 << 20)"), overMessage)
            let size = overMessage.split(separator: " ").compactMap { Int($0) }.first ?? 0
            XCTAssertGreaterThanOrEqual(size, arrayBytes, overMessage)
            XCTAssertLessThan(size, arrayBytes + 4096, overMessage)
            // Within the message limit: the array limit is what it passes, and it says so.
            let overArray = try await refusal(member, messageLimit: ObjectTree.protocolMessageLimit)
            let array = overArray.components(separatedBy: "an array of ").dropFirst().first.flatMap { Int($0.prefix { $0.isNumber }) } ?? 0
            XCTAssertGreaterThanOrEqual(array, arrayBytes, overArray)
            XCTAssertLessThan(array, arrayBytes + 4096, overArray)
            XCTAssertTrue(overArray.contains("\(ObjectTree.protocolArrayLimit)"), overArray)
        }
        service.close()
        client.close()
    }
}

/// Signals received by a test connection.
final class SignalLog: @unchecked Sendable { // every access holds `lock`
    struct Entry: Sendable {
        var member: String
        var invalidated: [String]
        var changedCount: Int
    }
    private let lock = NSLock()
    private var entries: [Entry] = []

    func append(_ message: Message) {
        guard message.sender?.hasPrefix(":") == true, message.path != "/org/freedesktop/DBus" else { return }
        let args = (try? message.arguments()) ?? []
        var invalidated: [String] = []
        var changedCount = 0
        if message.member == "PropertiesChanged", args.count == 3 {
            if case .array(_, let names) = args[2] { invalidated = names.compactMap(\.stringValue) }
            if case .dictionary(_, _, let items) = args[1] { changedCount = items.count }
        }
        let entry = Entry(member: message.member ?? "", invalidated: invalidated, changedCount: changedCount)
        lock.withLock { entries.append(entry) }
    }

    func wait(_ condition: @escaping ([Entry]) -> Bool) async -> [Entry] {
        _ = await eventually(timeout: 10) { lock.withLock { condition(entries) } }
        return lock.withLock { entries }
    }

    private final class Admissions: @unchecked Sendable { // confined to the service's queue
        var asked: [(member: String, uid: UInt32?, size: Int)] = []
    }

    func testReplyAdmissionSeesTheCallerAndTheSizeAndItsErrorReplacesTheReply() async throws {
        let bus = try TestBus.start()
        defer { bus.stop() }
        let service = try await bus.connect()
        let client = try await bus.connect()
        let admissions = Admissions()
        let tree = await onQueue(service) { () -> ObjectTree in
            let tree = ObjectTree(connection: service)
            tree.requiresCredentials = true
            tree.replyAdmission = { call, credentials, size in
                admissions.asked.append((call.member ?? "", credentials?.userID, size))
                return size > 5000 ? DBusError(name: DBusError.Name.limitsExceeded, message: "\(size) bytes are too many for you") : nil
            }
            tree.export(ExportedObject {
                [InterfaceDescription("org.propbus.Test", properties: .fixed([
                    PropertyDescription("Big", type: .string, get: { .string(String(repeating: "x", count: 10_000)) }),
                    PropertyDescription("Small", type: .int32, get: { .int32(1) }),
                ]))]
            }, at: "/o")
            return tree
        }
        for member in ["Get", "GetAll"] {
            let arguments: [DBusValue] = member == "Get" ? [.string("org.propbus.Test"), .string("Big")] : [.string("org.propbus.Test")]
            do {
                _ = try await client.call(destination: service.uniqueName, path: "/o", interface: "org.freedesktop.DBus.Properties",
                                          member: member, arguments: arguments)
                XCTFail("\(member): a refused reply went out")
            } catch {
                XCTAssertEqual(error.name, DBusError.Name.limitsExceeded)
                XCTAssertTrue(error.message.contains("too many for you"), error.message)
            }
        }
        let small = try await client.call(destination: service.uniqueName, path: "/o", interface: "org.freedesktop.DBus.Properties",
                                          member: "Get", arguments: [.string("org.propbus.Test"), .string("Small")])
        XCTAssertEqual(small, [.variant(.int32(1))])
        let asked = await onQueue(service) { admissions.asked.map { "\($0.member) \($0.uid.map(String.init) ?? "nil") \($0.size > 10_000)" } }
        XCTAssertEqual(asked, ["Get \(getuid()) true", "GetAll \(getuid()) true", "Get \(getuid()) false"])
        // A small reply is charged about its size, not the allowance kept for any header: a
        // client's thousands of small Gets must not add up to a quota as 2 KiB each.
        let smallSize = await onQueue(service) { admissions.asked.last?.size ?? 0 }
        XCTAssertLessThan(smallSize, 200, "a Get of an int32 charged \(smallSize) bytes")
        withExtendedLifetime(tree) {}
        service.close()
        client.close()
    }
}
