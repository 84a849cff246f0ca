import DBus
import XCTest

/// ``ObjectTree/attributesCalls``: a call says who made it (``MethodCall/identity``, looked up
/// once per connection) without its credentials being something to decide or charge by.
final class CallAttributionTests: XCTestCase {
    func testAnAttributedCallCarriesAnIdentityAndNoCredentials() async throws {
        let bus = try TestBus.start()
        defer { bus.stop() }
        let service = try await bus.connect()
        let client = try await bus.connect()
        let tree = await onQueue(service) { () -> ObjectTree in
            let tree = ObjectTree(connection: service)
            tree.attributesCalls = true
            tree.export(ExportedObject {
                [InterfaceDescription("org.propbus.Test", methods: [
                    MethodDescription("Who", out: [("uid", .uint32), ("pid", .uint32), ("decides", .boolean)]) { call in
                        .reply([.uint32(call.identity?.userID ?? 99999), .uint32(call.identity?.processID ?? 0), .boolean(call.credentials != nil)])
                    },
                ])]
            }, at: "/o")
            return tree
        }
        for _ in 1...2 {
            let reply = try await client.call(destination: service.uniqueName, path: "/o", interface: "org.propbus.Test", member: "Who", arguments: [])
            XCTAssertEqual(reply, [.uint32(getuid()), .uint32(UInt32(getpid())), .boolean(false)])
        }
        withExtendedLifetime(tree) {}
        service.close()
        client.close()
    }
}
