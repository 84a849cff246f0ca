import DBusValues
import XCTest

@testable import PropBus

final class KeyTests: XCTestCase {
    // MARK: Helpers

    /// The message of the `InvalidKey` error `text` raises, or `nil` (with a failure) if it parses.
    private func invalidKeyMessage(_ text: String, file: StaticString = #filePath, line: UInt = #line) -> String? {
        do {
            let key = try Key(text)
            XCTFail("'\(text)' parsed as \(key.group) / \(key.name)", file: file, line: line)
            return nil
        } catch {
            XCTAssertEqual(error.code, .invalidKey, file: file, line: line)
            XCTAssertEqual(error.name, "org.propbus.PropBus1.Error.InvalidKey", file: file, line: line)
            // A refusal quotes the rule, and names the key.
            XCTAssertTrue(error.message.hasSuffix(Key.rule), error.message, file: file, line: line)
            XCTAssertTrue(error.message.hasPrefix("invalid key '\(text)': "), error.message, file: file, line: line)
            return error.message
        }
    }

    private func assertInvalid(_ text: String, containing detail: String, file: StaticString = #filePath, line: UInt = #line) {
        guard let message = invalidKeyMessage(text, file: file, line: line) else { return }
        XCTAssertTrue(message.contains(detail), "'\(text)': \(message)", file: file, line: line)
    }

    // MARK: Valid keys

    func testSpecExamplesSplitIntoGroupAndName() throws {
        let cases: [(String, String, String)] = [
            ("settings.someBoolKey", "settings", "someBoolKey"),
            ("viewmodel.searchText", "viewmodel", "searchText"),
            ("ui.switch.on", "ui.switch", "on"),
            ("1a.b", "1a", "b"),
            ("a.b.c.d.e", "a.b.c.d", "e"),
            ("_._", "_", "_"),
            ("G9.N_9", "G9", "N_9"),
            ("0.x", "0", "x"),
        ]
        for (text, group, name) in cases {
            let key = try Key(text)
            XCTAssertEqual(key.text, text)
            XCTAssertEqual(key.group, group, text)
            XCTAssertEqual(key.name, name, text)
            XCTAssertEqual("\(key)", text)
        }
    }

    func testKeysUpTo255BytesAreAllowed() throws {
        let longest = "g." + String(repeating: "n", count: 253)
        XCTAssertEqual(longest.utf8.count, 255)
        XCTAssertEqual(try Key(longest).name.utf8.count, 253)
        assertInvalid(longest + "n", containing: "it is 256 bytes long")
    }

    func testKeysCompareByText() throws {
        let keys = try ["b.a", "a.b", "a.a", "a.b.c"].map { try Key($0) }
        XCTAssertEqual(keys.sorted().map(\.text), ["a.a", "a.b", "a.b.c", "b.a"])
        XCTAssertEqual(try Key("x.y"), try Key("x.y"))
        XCTAssertEqual(Set(try ["x.y", "x.y", "x.z"].map { try Key($0) }).count, 2)
    }

    // MARK: Invalid keys

    func testAKeyNeedsAGroup() {
        assertInvalid("nodot", containing: "it has no group (no '.')")
        assertInvalid("", containing: "it is empty")
    }

    func testEmptySegmentsAreRefused() {
        assertInvalid(".name", containing: "empty group segment")
        assertInvalid("a..b", containing: "empty group segment")
        assertInvalid("a.b..c", containing: "empty group segment")
        assertInvalid("ui.switch.", containing: "the name after the last '.' is empty")
        assertInvalid(".", containing: "the name after the last '.' is empty")
    }

    func testTheNameMustNotStartWithADigit() {
        assertInvalid("ui.1st", containing: "the name must not start with a digit")
        assertInvalid("a.b.9", containing: "the name must not start with a digit")
    }

    func testDisallowedCharactersAreQuoted() {
        assertInvalid("ui.switch-on", containing: "character '-'")
        assertInvalid("ui-x.on", containing: "character '-'")
        assertInvalid("ui.sw itch", containing: "character ' '")
        assertInvalid("ui/switch.on", containing: "character '/'")
        assertInvalid("ui.on$", containing: "character '$'")
        assertInvalid("ui.on\u{0}", containing: "is not allowed")
        for message in ["a.b-c", "a.b c", "a.b/c"].compactMap({ invalidKeyMessage($0) }) {
            XCTAssertTrue(message.contains("is not allowed"), message)
        }
    }

    func testNonASCIICharactersAreRefusedAndQuotedWhole() {
        guard let message = invalidKeyMessage("ui.café") else { return }
        XCTAssertTrue(message.contains("is not allowed"), message)
        // A refusal names the offending character: the whole character, not its first byte.
        XCTAssertTrue(message.contains("character 'é'"), message)
        XCTAssertFalse(message.contains("\\x"), message)
        for text in ["ü.x", "x.日本", "x.🎛️"] {
            assertInvalid(text, containing: "is not allowed")
        }
    }

    // MARK: Object paths

    func testGroupsMapToObjectPathsBelowTheRoot() throws {
        XCTAssertEqual(Key.rootPath, "/org/propbus/PropBus1")
        XCTAssertEqual(try Key("ui.switch.on").objectPath, "/org/propbus/PropBus1/ui/switch")
        XCTAssertEqual(try Key("settings.someBoolKey").objectPath, "/org/propbus/PropBus1/settings")
        XCTAssertEqual(try Key("1a.b").objectPath, "/org/propbus/PropBus1/1a")
        XCTAssertEqual(Key.objectPath(ofGroup: "a.b.c"), "/org/propbus/PropBus1/a/b/c")
        for text in ["ui.switch.on", "1a.b", "_._", "a.b.c.d.e"] {
            XCTAssertTrue(ObjectPath.isValid(try Key(text).objectPath), text)
        }
    }

    func testObjectPathsMapBackToGroups() throws {
        XCTAssertEqual(Key.group(atPath: "/org/propbus/PropBus1/ui/switch"), "ui.switch")
        XCTAssertEqual(Key.group(atPath: "/org/propbus/PropBus1/settings"), "settings")
        for text in ["ui.switch.on", "1a.b", "a.b.c.d.e"] {
            let key = try Key(text)
            XCTAssertEqual(Key.group(atPath: key.objectPath), key.group, text)
        }
    }

    func testPathsOutsideTheRootHaveNoGroup() {
        XCTAssertNil(Key.group(atPath: "/org/propbus/PropBus1"))
        XCTAssertNil(Key.group(atPath: "/org/propbus/PropBus10/ui"))
        XCTAssertNil(Key.group(atPath: "/org/propbus"))
        XCTAssertNil(Key.group(atPath: "/"))
        XCTAssertNil(Key.group(atPath: "/other/org/propbus/PropBus1/ui"))
    }
}
