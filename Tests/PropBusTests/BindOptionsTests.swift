import DBusValues
import PropBus
import XCTest

/// A binding's options are read in one place, `BindOptions`, as `Bind`, model files, propctl and
/// the store read them; and the bindings they describe are refused at bind time, on the core
/// model without a bus, for what the daemon's `Bind` refuses.
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

    // Moved from the daemon's DaemonBindingErrorTests: what they pinned is the core's.

    func testMalformedExpressionsAreRejectedNamingTheColumn() throws {
        assertRefused(["to_key": .string("value == ")], .invalidExpression, containing: ["to_key", "column 10", "expected"])
        assertRefused(["to_target": .string(#"value = "On""#)], .invalidExpression, containing: ["to_target", "column 7", "'=='"])
        assertRefused(["to_key": .string(#"value == "1" ? "On""#)], .invalidExpression, containing: ["column"])
        let model = try PropertyModel(store: MemoryStore())
        _ = try model.create(key: "ui.power.label", type: "s", defaultValue: .string("Off"))
        _ = try model.create(key: "dev.power.digit", type: "s", defaultValue: .string("0"))
        XCTAssertThrowsError(try model.bind(key: "ui.power.label", to: "dev.power.digit", options: ["to_key": .string("value == ")], owner: nil))
        XCTAssertEqual(model.bindings.all, [], "a refused Bind left a binding")
    }

    /// With two expressions in one call, the message says which one is wrong, and of which binding.
    func testExpressionErrorsNameTheOptionAndTheBinding() throws {
        let model = try PropertyModel(store: MemoryStore())
        _ = try model.create(key: "ui.power.label", type: "s", defaultValue: .string("Off"))
        _ = try model.create(key: "dev.power.digit", type: "s", defaultValue: .string("0"))
        XCTAssertThrowsError(try model.bind(key: "ui.power.label", to: "dev.power.digit", options: [
            "to_key": .string(#"value == "1" ? "On" : "Off""#), "to_target": .string(#"value == "On" ? "1" "0""#),
        ], owner: nil)) { error in
            let error = error as? PropBusError
            XCTAssertEqual(error?.code, .invalidExpression)
            for piece in ["to_target", "ui.power.label", "dev.power.digit"] {
                XCTAssertTrue(error?.message.contains(piece) == true, "\(String(describing: error)) lacks \(piece)")
            }
        }
    }

    func testTransformWithADefiniteTypeErrorIsRefusedAtBindTime() throws {
        let model = try PropertyModel(store: MemoryStore())
        _ = try model.create(key: "ui.switch.on", type: "b", defaultValue: .boolean(false))
        _ = try model.create(key: "ui.count", type: "i", defaultValue: .int32(0))
        XCTAssertThrowsError(try model.bind(key: "ui.count", to: "ui.switch.on",
                                            options: ["to_key": .string("value + 1"), "direction": .string("from")], owner: nil)) { error in
            let error = error as? PropBusError
            XCTAssertEqual(error?.code, .invalidExpression)
            XCTAssertTrue(error?.message.contains("column") == true, String(describing: error))
        }
        XCTAssertEqual(model.bindings.all, [])
    }

    func testTypesThatCannotBecomeEachOtherAreRefusedAtBindTime() throws {
        let model = try PropertyModel(store: MemoryStore())
        _ = try model.create(key: "ui.switch.on", type: "b", defaultValue: .boolean(false))
        _ = try model.create(key: "settings.theme", type: "s", defaultValue: .string("dark"))
        XCTAssertThrowsError(try model.bind(key: "ui.switch.on", to: "settings.theme", options: [:], owner: nil)) { error in
            let error = error as? PropBusError
            XCTAssertEqual(error?.code, .transformFailed)
            for piece in ["ui.switch.on", "settings.theme", "'string'", "'boolean'"] {
                XCTAssertTrue(error?.message.contains(piece) == true, "\(String(describing: error)) lacks \(piece)")
            }
        }
        // A transform fixes one direction only; the other still cannot be converted.
        XCTAssertThrowsError(try model.bind(key: "ui.switch.on", to: "settings.theme",
                                            options: ["to_key": .string(#"value == "dark""#)], owner: nil)) { error in
            XCTAssertEqual((error as? PropBusError)?.code, .transformFailed)
        }
        _ = try model.bind(key: "ui.switch.on", to: "settings.theme", options: [
            "to_key": .string(#"value == "dark""#), "to_target": .string(#"value ? "dark" : "light""#),
        ], owner: nil)
        XCTAssertEqual(try model.value(of: "ui.switch.on"), .boolean(true))
        XCTAssertEqual(model.bindings.all.count, 1)
    }
}
