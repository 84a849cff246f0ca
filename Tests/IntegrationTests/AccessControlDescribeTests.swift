import DBus
import XCTest

/// `describe` of a secret key the caller may not read gives the answer `get` gives:
/// AccessDenied naming the key, not UnknownKey.
final class AccessControlDescribeTests: AccessControlTestCase, @unchecked Sendable {
    func testDescribeOfASecretAnswersAsGetDoes() async throws {
        try await client.create("vault.pin", "s", default: .string("1234"),
                                options: ["secret": .boolean(true), "writers": .array(of: .string, [.string("root")])])
        let get = try await propctlAsNobody(["get", "vault.pin"])
        assertDenied(get, naming: "vault.pin")
        let described = try await propctlAsNobody(["describe", "vault.pin"])
        assertDenied(described, naming: "vault.pin")
        XCTAssertFalse(described.stdout.contains("1234") || described.stderr.contains("1234"), "\(described)")
        let unknown = try await propctlAsNobody(["describe", "vault.nothing"])
        XCTAssertTrue(unknown.stderr.contains("UnknownKey"), "\(unknown)")
    }
}
