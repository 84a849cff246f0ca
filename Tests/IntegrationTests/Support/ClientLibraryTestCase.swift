import PropBusClient
import XCTest

/// A ``DaemonTestCase`` with a `PropBusClient` (the Swift client library) on the test's bus,
/// connected after the daemon started and closed before it stops.
class ClientLibraryTestCase: DaemonTestCase, @unchecked Sendable {
    var library: PropBusClient!

    override func setUp() async throws {
        try await super.setUp()
        library = try await PropBusClient.connect(.address(bus.address))
    }

    override func tearDown() async throws {
        library?.close()
        library = nil
        try await super.tearDown()
    }
}
