import DBus
import Foundation
import Observation
import PropBus
import PropBusClient
import XCTest

/// The search screen's view model: a text bound to a key and a command enabled by its length.
@MainActor @Observable
final class SearchModel {
    var searchText = ""
    var spinner = false
    var canSearch = false
}

/// A bound write and a command in the same main-actor turn: the command must see the write
/// (the MVVM article binds the text and the command exactly so).
final class PropBusClientCommitTests: ClientLibraryTestCase, @unchecked Sendable {
    override func setUp() async throws {
        try await super.setUp()
        try await client.create("viewmodel.searchText", "s", default: .string(""))
        try await client.createCommand("viewmodel.executeSearch", [
            "exec": .array(of: .string, [.string("/bin/sh"), .string("-c"), .string(#"printf '%s' "$PROPBUS_INPUT""#)]),
            "enabled_when": .string("length(viewmodel.searchText) > 3"), "persistent": .boolean(false)])
    }

    @MainActor
    func testTypingTheLastCharacterAndExecutingInTheSameTurnSeesTheText() async throws {
        let model = SearchModel()
        let binding = library.channel(library.property("viewmodel.searchText", as: String.self)).bind(\.searchText, of: model)
        defer { binding.cancel() }
        let search = library.command("viewmodel.executeSearch")
        let searchText = library.property("viewmodel.searchText", as: String.self)
        for attempt in 0..<20 {
            model.searchText = "a\(attempt)"
            let short = await onMain { searchText.current == "a\(attempt)" && search.enabled.current == false }
            XCTAssertTrue(short, "the short text reached the daemon")
            model.searchText = "kitten\(attempt)"
            do {
                let result = try await search.execute("kitten\(attempt)")
                XCTAssertEqual(result, "kitten\(attempt)")
            } catch {
                XCTFail("attempt \(attempt): the execute went out before the bound write: \(error)")
            }
        }
    }

    @MainActor
    func testCommittedWaitsUntilTheDaemonHasTheBoundWrite() async throws {
        let model = SearchModel()
        let binding = library.channel(library.property("viewmodel.searchText", as: String.self)).bind(\.searchText, of: model)
        defer { binding.cancel() }
        for attempt in 0..<10 {
            model.searchText = "text \(attempt)"
            await binding.committed()
            let value = try await client.get("viewmodel.searchText")
            XCTAssertEqual(value, .string("text \(attempt)"))
        }
    }

    @MainActor
    private func onMain(timeout: TimeInterval = 10, _ condition: @MainActor () -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while !condition(), Date() < deadline { try? await Task.sleep(nanoseconds: 2_000_000) }
        return condition()
    }
}
