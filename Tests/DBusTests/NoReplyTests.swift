import Foundation
import XCTest

@testable import DBus

/// NO_REPLY_EXPECTED is honoured on every path. The bus drops replies nobody
/// asked for before a monitor sees them, so this looks at what the service hands to libdbus
/// (``Connection/sendObserver``).
final class NoReplyTests: XCTestCase {
    private final class Service: @unchecked Sendable { // confined to the connection's queue
        var stashed: [MethodCall] = []
        var failCommit = false
        var replies: [(kind: Message.Kind, replySerial: UInt32, error: String?)] = []
    }

    private static let interface = "org.propbus.Test"

    private func export(on connection: Connection, _ service: Service) async -> ObjectTree {
        await onQueue(connection) {
            let tree = ObjectTree(connection: connection)
            tree.export(ExportedObject {
                [InterfaceDescription(Self.interface, methods: [
                    MethodDescription("Echo", in: [("text", .string)], out: [("text", .string)]) { call in .reply([call.arguments[0]]) },
                    MethodDescription("Fail") { _ throws(DBusError) in throw DBusError.failed("refused") },
                    MethodDescription("Later") { call in
                        service.stashed.append(call)
                        return .deferred
                    },
                    MethodDescription("LaterFail") { call in
                        service.stashed.append(call)
                        return .deferred
                    },
                    MethodDescription("Write", writes: true) { _ in .reply([]) },
                    // Answers the deferred calls, then itself: the barrier.
                    MethodDescription("Barrier") { _ in
                        for call in service.stashed {
                            if call.message.member == "LaterFail" { call.fail(.failed("later")) } else { call.reply([]) }
                        }
                        service.stashed = []
                        return .reply([])
                    },
                ], properties: .fixed([
                    PropertyDescription("Value", type: .int32, access: .readwrite, get: { .int32(1) }, set: { _, _ in }),
                ]))]
            }, at: "/obj")
            tree.addBeforeFlushHook { service.failCommit ? DBusError.failed("commit failed") : nil }
            connection.sendObserver = { message in
                if message.kind == .methodReturn || message.kind == .error {
                    service.replies.append((message.kind, message.replySerial, message.errorName))
                }
            }
            return tree
        }
    }

    private func call(_ path: String, _ interface: String?, _ member: String, _ arguments: [DBusValue] = [],
                      to destination: String) throws -> Message {
        let message = try Message.methodCall(destination: destination, path: path, interface: interface, member: member)
        try message.append(arguments)
        return message
    }

    func testNoReplyOnEveryPath() async throws {
        let bus = try TestBus.start()
        defer { bus.stop() }
        let serviceConnection = try await bus.connect()
        let client = try await bus.connect()
        let service = Service()
        let tree = await export(on: serviceConnection, service)
        let name = serviceConnection.uniqueName
        let properties = "org.freedesktop.DBus.Properties"
        let silent: [Message] = [
            try call("/nowhere", Self.interface, "Echo", [.string("x")], to: name),           // unknown object
            try call("/obj", "org.propbus.Nothing", "Echo", [.string("x")], to: name),         // unknown interface
            try call("/obj", Self.interface, "Nothing", to: name),                             // unknown method
            try call("/obj", nil, "Nothing", to: name),                                        // unknown method, no interface
            try call("/obj", Self.interface, "Echo", [.int32(1)], to: name),                   // wrong signature
            try call("/obj", Self.interface, "Echo", [.string("x")], to: name),                // success
            try call("/obj", Self.interface, "Fail", to: name),                                // handler error
            try call("/obj", Self.interface, "Later", to: name),                               // deferred reply
            try call("/obj", Self.interface, "LaterFail", to: name),                           // deferred error
            try call("/obj", properties, "Get", [.string(Self.interface), .string("Nope")], to: name), // unknown property
            try call("/obj", properties, "Set", [.string(Self.interface), .string("Value"), .variant(.int32(2))], to: name),
            try call("/obj", properties, "GetAll", [.string(Self.interface)], to: name),
            try call("/obj", "org.freedesktop.DBus.Introspectable", "Introspect", to: name),
            try call("/obj", "org.freedesktop.DBus.Peer", "Ping", to: name),
        ]
        for message in silent {
            message.noReply = true
            client.send(message)
        }
        var barriers: [UInt32] = []
        let barrier = try call("/obj", Self.interface, "Barrier", to: name)
        _ = try await client.call(barrier)
        barriers.append(barrier.serial)

        // A write whose commit fails: its success would become an error reply.
        await onQueue(serviceConnection) { service.failCommit = true }
        let write = try call("/obj", Self.interface, "Write", to: name)
        write.noReply = true
        client.send(write)
        let setFailing = try call("/obj", properties, "Set", [.string(Self.interface), .string("Value"), .variant(.int32(3))], to: name)
        setFailing.noReply = true
        client.send(setFailing)
        let barrier2 = try call("/obj", Self.interface, "Barrier", to: name)
        _ = try await client.call(barrier2)
        barriers.append(barrier2.serial)
        await onQueue(serviceConnection) { service.failCommit = false }

        // A service that refuses every call (shutting down).
        await onQueue(serviceConnection) { tree.refuseCalls(with: DBusError(name: DBusError.Name.noServer, message: "stopping")) }
        let refused = try call("/obj", Self.interface, "Echo", [.string("x")], to: name)
        refused.noReply = true
        client.send(refused)
        let barrier3 = try call("/obj", Self.interface, "Barrier", to: name)
        do {
            _ = try await client.call(barrier3)
            XCTFail("a refusing tree answered the barrier with success")
        } catch {}
        barriers.append(barrier3.serial)

        // A connection without any objects answers calls itself.
        let bare = try await bus.connect()
        let bareSent = Box()
        await onQueue(bare) { bare.sendObserver = { bareSent.add("\($0.kind) \($0.replySerial)") } }
        let toBare = try call("/obj", Self.interface, "Echo", [.string("x")], to: bare.uniqueName)
        toBare.noReply = true
        client.send(toBare)
        let bareBarrier = try call("/obj", Self.interface, "Echo", [.string("x")], to: bare.uniqueName)
        do { _ = try await client.call(bareBarrier) } catch {}
        XCTAssertEqual(bareSent.all, ["error \(bareBarrier.serial)"])

        let replies = await onQueue(serviceConnection) { service.replies.map { "\($0.kind) \($0.replySerial) \($0.error ?? "")" } }
        let expected = ["methodReturn \(barriers[0]) ", "methodReturn \(barriers[1]) ",
                        "error \(barriers[2]) \(DBusError.Name.noServer)"]
        XCTAssertEqual(replies, expected, "replies were sent to calls that asked for none")
        serviceConnection.close()
        client.close()
        bare.close()
    }
}
