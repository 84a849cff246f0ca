import Foundation
import XCTest

/// `propctl codegen swift MODEL.json`: a Swift file of typed accessors for the client library,
/// which compiles against the built `PropBusClient` module.
final class CodegenTests: XCTestCase {
    private static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    private func codegen(_ arguments: [String]) async throws -> CommandResult {
        try await runCommand(BuildProducts.propctl, ["codegen"] + arguments,
                             environment: PrivateBus.isolatedEnvironment(address: nil), timeout: 20)
    }

    // What the generated file says is pinned on the generator itself, in
    // PropctlTests.CodegenAndCompletionTests; here it is compiled.

    func testTheGeneratedFlickrSearchFileCompilesAgainstTheLibrary() async throws {
        let model = Self.packageRoot.appendingPathComponent("examples/flickr-search.json").path
        let result = try await codegen(["swift", model])
        XCTAssertEqual(result.status, 0, result.stderr)
        let directory = try makeTemporaryDirectory(prefix: "pbit-codegen")
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("FlickrSearchKeys.swift")
        try result.stdout.write(to: file, atomically: true, encoding: .utf8)
        // A use of the accessors, so the types are checked too, not only the declarations.
        let use = directory.appendingPathComponent("Use.swift")
        try """
        import PropBusClient
        func use(_ client: PropBusClient) async throws {
            let model = FlickrSearchKeys(client)
            let text: Property<String> = model.viewmodel.searchText
            try await text.set("cats")
            let hidden: Bool? = model.view.loadingIndicatorHidden.current
            _ = hidden
            let search: Command<String, String> = model.viewmodel.executeSearch
            _ = try await search.execute("cats")
        }
        """.write(to: use, atomically: true, encoding: .utf8)
        let typecheck = try await runCommand(Self.swiftc, Self.typecheckArguments + [file.path, use.path],
                                             environment: ProcessInfo.processInfo.environment, timeout: 300)
        XCTAssertEqual(typecheck.status, 0, "swiftc -typecheck failed:\n\(typecheck.stderr)\n\(result.stdout)")
    }

    func testAnUnknownLanguageIsAUsageError() async throws {
        let model = Self.packageRoot.appendingPathComponent("examples/flickr-search.json").path
        let result = try await codegen(["kotlin", model])
        XCTAssertEqual(result.status, 64, result.stderr)
        XCTAssertTrue(result.stderr.contains("swift"), result.stderr)
    }

    /// The compiler that built the tests: beside `swift` on PATH, else the toolchain in /opt.
    static var swiftc: String {
        (try? ChildProcess.resolve("swiftc")) ?? "/opt/swift/usr/bin/swiftc"
    }

    /// `-typecheck` against the built modules: PropBusClient and what it imports (the D-Bus
    /// library, whose C module needs libdbus's headers).
    static var typecheckArguments: [String] {
        let modules = BuildProducts.directory.appendingPathComponent("Modules").path
        return ["-typecheck", "-I", modules, "-I", BuildProducts.directory.path,
                "-I", packageRoot.appendingPathComponent("Sources/CDBus").path,
                "-Xcc", "-I/usr/include/dbus-1.0", "-Xcc", "-I/usr/lib/x86_64-linux-gnu/dbus-1.0/include"]
    }
}
