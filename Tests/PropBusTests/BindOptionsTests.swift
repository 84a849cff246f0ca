import DBusValues
import PropBus
import XCTest

/// A binding's options are read in one place, `BindOptions`, as `Bind`, model files, propctl and
/// the store read them.
final class BindOptionsTests: XCTestCase {
    private func assertRefused(_ options: [String: DBusValue], _ code: PropBusError.Code, containing pieces: [String],
                               file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try BindOptions(options: options, binding: "the binding a.x ↔ b.y"), file: file, line: line) { error in
            guard let error = error as? PropBusError else { return XCTFail("\(error)", file: file, line: line) }
            XCTAssertEqual(error.code, code, error.message, file: file, line: line)
            for piece in pieces { XCTAssertTrue(error.message.contains(piece), "\(error.message) lacks \(piece)", file: file, line: line) }
        }
    }

    func testNoOptionsAreBindsDefaults() throws {
        XCTAssertEqual(try BindOptions(options: [:]), BindOptions())
        XCTAssertEqual(BindOptions().direction, .both)
        XCTAssertFalse(BindOptions().persistent)
        XCTAssertNil(BindOptions().toKey)
    }

    func testEveryOptionIsReadWrappedOrNotAndWrittenBackAsBindTakesIt() throws {
        let options: [String: DBusValue] = [
            "direction": .variant(.string("from")), "persistent": .boolean(true),
            "to_key": .string("value * 2"), "to_target": .variant(.string("value / 2")),
        ]
        let parsed = try BindOptions(options: options)
        XCTAssertEqual(parsed.direction, .from)
        XCTAssertTrue(parsed.persistent)
        XCTAssertEqual(parsed.toKey?.text, "value * 2")
        XCTAssertEqual(parsed.toTarget?.text, "value / 2")
        XCTAssertEqual(parsed.dictionary, ["direction": .string("from"), "persistent": .boolean(true),
                                           "to_key": .string("value * 2"), "to_target": .string("value / 2")])
        XCTAssertEqual(try BindOptions(options: parsed.dictionary), parsed)
        let binding = Binding(id: 3, key: try Key("a.x"), to: try Key("b.y"), options: parsed, owner: ":1.4")
        XCTAssertEqual(binding.bindOptions, parsed)
        XCTAssertEqual(binding.options["owner"], nil, "a persistent binding belongs to no connection")
    }

    func testAnUnknownOptionNamesTheOnesBindTakes() {
        assertRefused(["bogus": .boolean(true)], .invalidArgs, containing: ["'bogus'", "direction", "to_key", "to_target", "persistent"])
    }

    func testEachOptionRefusesAValueOfTheWrongTypeSayingWhatItTakes() {
        assertRefused(["direction": .string("sideways")], .invalidArgs, containing: ["direction", "a.x ↔ b.y", "both, from, to", "sideways"])
        assertRefused(["persistent": .string("yes")], .invalidArgs, containing: ["persistent", "(b)"])
        assertRefused(["to_key": .int32(1)], .invalidArgs, containing: ["to_key", "(s)"])
    }
}
