import Foundation
import XCTest

@testable import DBus

/// Objects exported with `announce: false` (a service's start-up, before it owns its name) get
/// no InterfacesAdded, yet are served and listed by GetManagedObjects like any other (a lean start-up:
/// the start-up signals cost a quarter of a 10k-property start and reached no one).
final class ObjectTreeAnnounceTests: XCTestCase {
    private final class Added: @unchecked Sendable { // every access holds `lock`
        private let lock = NSLock()
        private var paths: [String] = []
        func append(_ message: Message) {
            guard message.member == "InterfacesAdded", let first = try? message.arguments().first,
                  case .objectPath(let path) = first else { return }
            lock.withLock { paths.append(path) }
        }
        var all: [String] { lock.withLock { paths } }
    }

    func testAnObjectExportedUnannouncedSendsNoInterfacesAddedButIsManaged() async throws {
        let bus = try TestBus.start()
        defer { bus.stop() }
        let service = try await bus.connect()
        let client = try await bus.connect()
        let added = Added()
        _ = await onQueue(client) { client.addSignalHandler(matching: nil) { added.append($0) } }
        try await client.addMatch(MatchRule(sender: service.uniqueName))
        @Sendable func object(_ value: Int32) -> ExportedObject {
            ExportedObject { [InterfaceDescription("org.propbus.Test", properties: .fixed([
                PropertyDescription("Value", type: .int32, get: { .int32(value) }),
            ]))] }
        }
        let tree = await onQueue(service) { () -> ObjectTree in
            let tree = ObjectTree(connection: service)
            tree.addObjectManager(at: "/m")
            tree.export(object(1), at: "/m/quiet", announce: false)
            // The barrier: exported in the same round, after the quiet one, and announced.
            tree.export(object(2), at: "/m/loud")
            service.scheduleRound()
            return tree
        }
        _ = await eventually(timeout: 10) { added.all.contains("/m/loud") }
        XCTAssertEqual(added.all, ["/m/loud"], "only the announced object has an InterfacesAdded")
        let reply = try await client.call(destination: service.uniqueName, path: "/m", interface: "org.freedesktop.DBus.ObjectManager",
                                          member: "GetManagedObjects", arguments: [])
        guard case .dictionary(_, _, let objects)? = reply.first else { return XCTFail("no a{oa{sa{sv}}} in \(reply)") }
        XCTAssertEqual(objects.map(\.key), [.objectPath("/m/loud"), .objectPath("/m/quiet")])
        let value = try await client.call(destination: service.uniqueName, path: "/m/quiet", interface: "org.freedesktop.DBus.Properties",
                                          member: "Get", arguments: [.string("org.propbus.Test"), .string("Value")])
        XCTAssertEqual(value, [.variant(.int32(1))])
        withExtendedLifetime(tree) {}
    }
}
