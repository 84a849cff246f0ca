import CommandLineKit
import PropBusModelFiles
import XCTest
@testable import propctl

/// What `propctl codegen` and `propctl completion` print, from the generators themselves: both
/// are pure functions of a model file or of the specs, so no propctl process and no daemon.
/// (Moved from IntegrationTests' CodegenTests and CompletionTests; compiling the generated file
/// and completing in real shells stay there.)
final class CodegenAndCompletionTests: XCTestCase {
    /// `<package>/examples/flickr-search.json`: this file is Tests/PropctlTests/….
    private static let flickrSearchModel = #filePath.split(separator: "/", omittingEmptySubsequences: false)
        .dropLast(3).joined(separator: "/") + "/examples/flickr-search.json"

    func testFlickrSearchModelGivesTypedAccessorsWithTheDescriptions() throws {
        let source = SwiftAccessors(model: try ModelFile(contentsOf: Self.flickrSearchModel)).source
        XCTAssertTrue(source.contains("import PropBusClient"), source)
        XCTAssertTrue(source.contains(#"client.property("viewmodel.searchText", as: String.self)"#), source)
        XCTAssertTrue(source.contains(#"client.property("view.loadingIndicatorHidden", as: Bool.self)"#), source)
        XCTAssertTrue(source.contains(#"client.command("viewmodel.executeSearch""#), source)
        XCTAssertTrue(source.contains("/// What the search field holds"), "descriptions become doc comments: \(source)")
        XCTAssertTrue(source.contains(#"Default: `"Flickr Search"`"#), "defaults are documented: \(source)")
    }

    func testZshAndFishScriptsCoverEverySubcommand() async throws {
        let scripts = CompletionScript(root: PropctlSpec.root)
        let zsh = try XCTUnwrap(scripts.script(for: "zsh"))
        XCTAssertTrue(zsh.hasPrefix("#compdef propctl"), zsh)
        let fish = try XCTUnwrap(scripts.script(for: "fish"))
        for name in ["get", "describe", "create-command", "cancel", "completion"] {
            XCTAssertTrue(fish.contains("-a \(name) -d"), "fish misses \(name)")
            XCTAssertTrue(zsh.contains("\n    \(name)) opts="), "zsh misses \(name)")
        }
        XCTAssertTrue(fish.contains("__fish_seen_subcommand_from reset' -l recursive -s r"), fish)
        // An unknown shell is a usage error (exit status 64).
        guard case .command(let parsed) = try CommandLineParser(root: PropctlSpec.root).parse(["completion", "tcsh"]) else {
            return XCTFail("propctl completion tcsh did not parse as a command")
        }
        do {
            try await CompletionVerb.run(parsed)
            XCTFail("propctl completion tcsh printed a script")
        } catch {
            XCTAssertEqual(error.code, .usage, error.message)
        }
    }
}
