import Foundation
import XCTest

@testable import DBus

/// What a connection keeps of the objects that register callbacks on it: nothing that outlives
/// them.
final class ConnectionLifetimeTests: XCTestCase {
    /// Turning credentials on then off drops the credential cache; its NameOwnerChanged handler
    /// stayed on the connection with an `unowned` reference and crashed the next signal.
    func testCredentialCacheDroppedWhileConnectionLives() async throws {
        let bus = try TestBus.start()
        defer { bus.stop() }
        let service = try await bus.connect()
        let tree = await onQueue(service) { () -> ObjectTree in
            let tree = ObjectTree(connection: service)
            tree.requiresCredentials = true
            tree.requiresCredentials = false
            return tree
        }
        try await assertDepartureIsDelivered(to: service, on: bus)
        // And the tree still works with credentials turned on again.
        await onQueue(service) { tree.requiresCredentials = true }
        let counted = await onQueue(service) { tree.requiresCredentials }
        XCTAssertTrue(counted)
        service.close()
    }

    /// A credential cache dropped with its tree leaves no handler behind either.
    func testTreeDroppedWhileConnectionLives() async throws {
        let bus = try TestBus.start()
        defer { bus.stop() }
        let service = try await bus.connect()
        await onQueue(service) {
            let tree = ObjectTree(connection: service)
            tree.requiresCredentials = true
            _ = tree
        }
        try await assertDepartureIsDelivered(to: service, on: bus)
        service.close()
    }
    /// Another connection leaves the bus; `service` must get its NameOwnerChanged (the signal
    /// a dropped cache's dangling handler used to crash on). The handler is registered after
    /// the cache's: when it has run, the cache's would have too.
    private func assertDepartureIsDelivered(to service: Connection, on bus: TestBus,
                                            file: StaticString = #filePath, line: UInt = #line) async throws {
        try await service.addMatch(ObjectTree.credentialsMatchRule)
        let seen = Box()
        _ = await onQueue(service) {
            service.addSignalHandler(matching: ObjectTree.credentialsMatchRule) { message in
                if let args = try? message.arguments(), args.count == 3, args[2].stringValue == "" { seen.add(args[0].stringValue ?? "") }
            }
        }
        let other = try await bus.connect()
        let name = other.uniqueName
        other.close()
        let departed = await eventually { seen.contains(name) }
        XCTAssertTrue(departed, "NameOwnerChanged for \(name) was not delivered", file: file, line: line)
    }
}

/// A set of strings shared between the connection's queue and the test.
final class Box: @unchecked Sendable { // every access holds `lock`
    private let lock = NSLock()
    private var items: [String] = []

    func add(_ item: String) { lock.withLock { items.append(item) } }
    func contains(_ item: String) -> Bool { lock.withLock { items.contains(item) } }
    var all: [String] { lock.withLock { items } }
}
