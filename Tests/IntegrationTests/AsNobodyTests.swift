import Foundation
import XCTest

/// Tests that switch to `nobody` must not depend on where the checkout lives: a
/// clone under a 0700 directory such as `/root` keeps `nobody` from the build products.
final class AsNobodyTests: XCTestCase {
    private var directory: URL!

    override func setUp() async throws {
        try await super.setUp()
        guard getuid() == 0 else { throw XCTSkip("needs root, to run programs as nobody") }
        // mkdtemp makes it 0700, like /root or a home directory.
        directory = try makeTemporaryDirectory(prefix: "pbit-private")
    }

    override func tearDown() async throws {
        if let directory { try? FileManager.default.removeItem(at: directory) }
        try await super.tearDown()
    }

    /// A program inside `directory`, which `nobody` cannot reach.
    private func privateProgram() throws -> String {
        let path = directory.appendingPathComponent("id").path
        try FileManager.default.copyItem(atPath: "/usr/bin/id", toPath: path)
        XCTAssertFalse(AsNobody.isReachable(path), "\(directory.path) should be private")
        return path
    }

    func testAProgramUnderAPrivateDirectoryStillRunsAsNobody() async throws {
        let program = try privateProgram()
        let result = try await AsNobody.run(program, ["-u"], environment: [:])
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertEqual(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "\(AsNobody.uid)")
    }

    func testTheBuildProductsRunAsNobodyWhereverTheCheckoutIs() async throws {
        let result = try await AsNobody.run(BuildProducts.propctl, ["--version"], environment: [:])
        XCTAssertEqual(result.status, 0, "\(result)")
    }

    func testAProgramThatCouldNotStartIsASetupFailureNotAResult() async throws {
        let program = try privateProgram()
        // runuser, unlike setpriv, drops its capabilities before execve: the exec itself fails.
        let result = try await runCommand("runuser", ["-u", "nobody", "--", program], environment: [:])
        XCTAssertThrowsError(try AsNobody.checkStarted(result, program)) { error in
            XCTAssertTrue("\(error)".contains("could not start \(program) as nobody"), "\(error)")
        }
        let started = try await AsNobody.run("/bin/sh", ["-c", "echo 'failed to execute' >&2; exit 127"], environment: [:])
        XCTAssertNoThrow(try AsNobody.checkStarted(started, "/bin/sh"), "a program's own words and status are its result")
    }
}
