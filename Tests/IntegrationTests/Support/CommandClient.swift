import DBus
import Foundation
import PropBus

/// Calls on commands (docs/dbus-api.md, docs/commands.md), as any D-Bus client would make them.
extension Client {
    static let commandInterface = "org.propbus.PropBus1.Command"

    func createCommand(_ key: String, _ options: [String: DBusValue]) async throws {
        _ = try await call(PropBusAPI.manager, "CreateCommand", [.string(key), .vardict(options)])
    }

    func deleteCommand(_ key: String) async throws {
        _ = try await call(PropBusAPI.manager, "DeleteCommand", [.string(key)])
    }

    /// `Execute`, waiting for the result however long the work takes.
    func execute(_ key: String, _ input: DBusValue = .string("")) async throws -> DBusValue {
        let message = try Message.methodCall(destination: PropBusAPI.busName, path: Key.objectPath(ofGroup: key),
                                             interface: Self.commandInterface, member: "Execute")
        try message.append([.variant(input)])
        let reply = try await connection.call(message, timeoutMilliseconds: 30_000).arguments()
        guard reply.count == 1, case .variant(let value) = reply[0] else { throw TestSetupError("Execute replied \(reply)") }
        return value
    }

    func start(_ key: String, _ input: DBusValue = .string("")) async throws -> UInt64 {
        let reply = try await call(at: Key.objectPath(ofGroup: key), Self.commandInterface, "Start", [.variant(input)])
        guard case .uint64(let id)? = reply.first else { throw TestSetupError("Start replied \(reply)") }
        return id
    }

    func cancel(_ key: String, _ id: UInt64) async throws {
        _ = try await call(at: Key.objectPath(ofGroup: key), Self.commandInterface, "Cancel", [.uint64(id)])
    }

    /// A property of the Command interface (`Enabled`, `Executing`, `Executions`, …).
    func commandProperty(_ key: String, _ name: String) async throws -> DBusValue {
        let reply = try await call(at: Key.objectPath(ofGroup: key), PropBusAPI.properties, "Get",
                                   [.string(Self.commandInterface), .string(name)])
        guard case .variant(let value)? = reply.first else { throw TestSetupError("Get replied \(reply)") }
        return value
    }

    /// Sends every message before any reply can arrive, so the daemon reads them in one round;
    /// returns the replies in order.
    func callTogether(_ messages: [Message]) async -> [Result<Message, DBusError>] {
        final class Replies: @unchecked Sendable {
            // Only touched on the connection's queue.
            var results: [Int: Result<Message, DBusError>] = [:]
        }
        let replies = Replies()
        let connection = connection
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            connection.queue.async {
                for (index, message) in messages.enumerated() {
                    connection.call(message, timeoutMilliseconds: 10_000) { result in
                        replies.results[index] = result
                        if replies.results.count == messages.count { continuation.resume() }
                    }
                }
            }
        }
        return (0..<messages.count).map { replies.results[$0]! }
    }

    /// Records the Command signals (Started, Finished, Failed) of one command.
    func recordExecutions(of key: String) async throws -> SignalRecorder {
        try await record(path: Key.objectPath(ofGroup: key), interface: Self.commandInterface)
    }
}

extension [ReceivedSignal] {
    /// The signals with this member, e.g. "Started".
    func named(_ member: String) -> [ReceivedSignal] { filter { $0.member == member } }
}
