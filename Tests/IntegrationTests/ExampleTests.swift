import Foundation
import XCTest

/// `examples/FlickrSearch`, the ReactiveCocoa MVVM introduction's Flickr search view model written with the client library, run
/// against a daemon with `examples/flickr-search.json` as the README shows; and its checked-in
/// accessors are what `propctl codegen swift` prints today.
final class ExampleTests: DaemonTestCase, @unchecked Sendable {
    private static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()
    private static let model = packageRoot.appendingPathComponent("examples/flickr-search.json").path

    override var daemonArguments: [String] { ["--model", Self.model] }

    override func setUp() async throws {
        // The search script waits 2 s like the article; the daemon passes its environment on.
        setenv("FLICKR_SEARCH_DELAY", "0.2", 1)
        try await super.setUp()
    }

    override func tearDown() async throws {
        unsetenv("FLICKR_SEARCH_DELAY")
        try await super.tearDown()
    }

    func testFlickrSearchBindsTheTextRunsTheSearchAndDrivesTheSpinner() async throws {
        let example = BuildProducts.directory.appendingPathComponent("FlickrSearch").path
        let result = try await runCommand(example, ["--address", bus.address, "kittens"], environment: bus.environment, timeout: 30)
        XCTAssertEqual(result.status, 0, result.description)
        XCTAssertEqual(result.stdout.split(separator: "\n").map(String.init), [
            "title: Flickr Search",
            "search text: kittens",
            "loading indicator hidden: false",
            "loading indicator hidden: true",
            #"result: {"searchString": "kittens", "photos": ["kittens at dusk", "kittens, close up", "more kittens"]}"#,
        ], result.description)
        // The two-way binding wrote the text to the daemon.
        let stored = try await client.get("viewmodel.searchText")
        XCTAssertEqual(stored, .string("kittens"))
    }

    func testAShortTextLeavesTheSearchDisabled() async throws {
        let example = BuildProducts.directory.appendingPathComponent("FlickrSearch").path
        let result = try await runCommand(example, ["--address", bus.address, "cat"], environment: bus.environment, timeout: 30)
        XCTAssertEqual(result.status, 1, result.description)
        XCTAssertTrue(result.stderr.contains("not enabled"), result.stderr)
    }

    func testTheExamplesAccessorsAreWhatCodegenPrints() async throws {
        let generated = try await runCommand(BuildProducts.propctl, ["codegen", "swift", Self.model],
                                             environment: bus.environment, timeout: 20)
        XCTAssertEqual(generated.status, 0, generated.stderr)
        let checkedIn = try String(contentsOfFile: Self.packageRoot.appendingPathComponent("examples/FlickrSearch/FlickrSearchKeys.swift").path, encoding: .utf8)
        XCTAssertEqual(generated.stdout, checkedIn, "run: propctl codegen swift examples/flickr-search.json > examples/FlickrSearch/FlickrSearchKeys.swift")
    }
}
