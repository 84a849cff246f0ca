import DBusValues
import XCTest

@testable import PropBus

final class PropertyDefinitionTests: XCTestCase {
    // MARK: Helpers

    private func definition(_ key: String, _ type: DBusType, _ defaultValue: DBusValue) throws -> PropertyDefinition {
        PropertyDefinition(key: try Key(key), type: type, defaultValue: defaultValue)
    }

    private var onSwitch: PropertyDefinition { get throws { try definition("ui.switch.on", .boolean, .boolean(false)) } }
    private var count: PropertyDefinition { get throws { try definition("x.count", .int32, .int32(0)) } }

    /// The error `apply(options:)` throws, or `nil` (with a failure) if it succeeds.
    private func optionError(_ definition: PropertyDefinition, _ options: [String: DBusValue],
                             file: StaticString = #filePath, line: UInt = #line) -> PropBusError? {
        var copy = definition
        do {
            _ = try copy.apply(options: options)
            XCTFail("options \(options) were accepted", file: file, line: line)
            return nil
        } catch {
            return error
        }
    }

    private func assertOptionsRefused(_ definition: PropertyDefinition, _ options: [String: DBusValue], message: String,
                                      file: StaticString = #filePath, line: UInt = #line) {
        guard let error = optionError(definition, options, file: file, line: line) else { return }
        XCTAssertEqual(error.code, .invalidArgs, file: file, line: line)
        XCTAssertEqual(error.name, "org.freedesktop.DBus.Error.InvalidArgs", file: file, line: line)
        XCTAssertEqual(error.message, message, file: file, line: line)
    }

    /// The error `check` throws, or `nil` (with a failure) if the value passes.
    private func checkError(_ definition: PropertyDefinition, _ value: DBusValue, maximumSize: Int = 1 << 20,
                            file: StaticString = #filePath, line: UInt = #line) -> PropBusError? {
        do {
            try definition.check(value, maximumSize: maximumSize)
            XCTFail("\(value) passed the check of \(definition.key)", file: file, line: line)
            return nil
        } catch {
            return error
        }
    }

    private func assertRefused(_ definition: PropertyDefinition, _ value: DBusValue, maximumSize: Int = 1 << 20,
                               code: PropBusError.Code, message: String, file: StaticString = #filePath, line: UInt = #line) {
        guard let error = checkError(definition, value, maximumSize: maximumSize, file: file, line: line) else { return }
        XCTAssertEqual(error.code, code, file: file, line: line)
        XCTAssertEqual(error.message, message, file: file, line: line)
    }

    // MARK: Options

    func testOptionsAreAppliedUnwrappingVariants() throws {
        var definition = try count
        let initial = try definition.apply(options: [
            "persistent": .variant(.boolean(false)), "writable": .boolean(false), "secret": .variant(.boolean(true)),
            "description": .variant(.string("how many")), "minimum": .variant(.int32(-5)), "maximum": .int32(5),
            "choices": .array(of: .variant, [.variant(.int32(1)), .variant(.int32(2))]),
            "writers": .variant(.array(of: .string, [.string(":1.42"), .string("uid:1000")])),
            "value": .variant(.int32(2)),
        ])
        XCTAssertEqual(initial, .int32(2))
        XCTAssertFalse(definition.persistent)
        XCTAssertFalse(definition.writable)
        XCTAssertTrue(definition.secret)
        XCTAssertEqual(definition.description, "how many")
        XCTAssertEqual(definition.minimum, .int32(-5))
        XCTAssertEqual(definition.maximum, .int32(5))
        XCTAssertEqual(definition.choices, [.int32(1), .int32(2)])
        XCTAssertEqual(definition.writers, [":1.42", "uid:1000"])
        XCTAssertEqual(definition.metadata["choices"], .array(of: .variant, [.variant(.int32(1)), .variant(.int32(2))]))
        XCTAssertEqual(definition.metadata["minimum"], .int32(-5))
    }

    func testNoOptionsKeepTheDefaults() throws {
        var definition = try onSwitch
        XCTAssertNil(try definition.apply(options: [:]))
        XCTAssertTrue(definition.persistent)
        XCTAssertTrue(definition.writable)
        XCTAssertFalse(definition.secret)
        XCTAssertNil(definition.minimum)
        XCTAssertNil(definition.choices)
        XCTAssertEqual(Set(definition.metadata.keys), ["default", "persistent", "writable", "description", "secret"])
    }

    func testUnknownOptionsAreRefusedListingTheKnownOnes() throws {
        assertOptionsRefused(try onSwitch, ["colour": .string("red")], message:
            "unknown option 'colour' for ui.switch.on; expected one of: persistent, writable, description, minimum, maximum, choices, value, writers, secret, scope")
    }

    func testOptionsOfTheWrongTypeAreRefused() throws {
        assertOptionsRefused(try onSwitch, ["persistent": .string("yes")],
                             message: "option 'persistent' of ui.switch.on must be a boolean (b), got 's'")
        assertOptionsRefused(try onSwitch, ["writable": .variant(.int32(1))],
                             message: "option 'writable' of ui.switch.on must be a boolean (b), got 'i'")
        assertOptionsRefused(try onSwitch, ["secret": .bytes([1])],
                             message: "option 'secret' of ui.switch.on must be a boolean (b), got 'ay'")
        assertOptionsRefused(try onSwitch, ["description": .boolean(true)],
                             message: "option 'description' of ui.switch.on must be a string (s), got 'b'")
        assertOptionsRefused(try count, ["minimum": .string("0")],
                             message: "option 'minimum' of x.count must be a number, got 's'")
        assertOptionsRefused(try count, ["maximum": .boolean(true)],
                             message: "option 'maximum' of x.count must be a number, got 'b'")
        assertOptionsRefused(try count, ["choices": .int32(1)],
                             message: "option 'choices' of x.count must be an array of variants (av), got 'i'")
        assertOptionsRefused(try count, ["writers": .string(":1.1")],
                             message: "option 'writers' of x.count must be an array of strings (as), got 's'")
        assertOptionsRefused(try count, ["writers": .array(of: .int32, [])],
                             message: "option 'writers' of x.count must be an array of strings (as), got 'ai'")
    }

    func testRangesNeedANumericType() throws {
        assertOptionsRefused(try onSwitch, ["minimum": .boolean(false)],
                             message: "option 'minimum' of ui.switch.on needs a numeric type, but the type is 'b'")
        let text = try definition("x.text", .string, .string(""))
        assertOptionsRefused(text, ["maximum": .int32(3)],
                             message: "option 'maximum' of x.text needs a numeric type, but the type is 's'")
    }

    func testMinimumAboveMaximumIsRefused() throws {
        assertOptionsRefused(try count, ["minimum": .int32(10), "maximum": .int32(1)],
                             message: "minimum 10 of x.count is above maximum 1")
        var equal = try count
        XCTAssertNoThrow(try equal.apply(options: ["minimum": .int32(3), "maximum": .int32(3)]))
    }

    func testChoicesMustHaveThePropertysType() throws {
        assertOptionsRefused(try count, ["choices": .array(of: .variant, [.variant(.int32(1)), .variant(.string("a"))])],
                             message: "choice 'a' of x.count has type 's', expected 'i'")
        assertOptionsRefused(try count, ["choices": .array(of: .variant, [.variant(.int64(1))])],
                             message: "choice 1 of x.count has type 'x', expected 'i'")
        assertOptionsRefused(try onSwitch, ["choices": .array(of: .variant, [.variant(.array(of: .string, []))])],
                             message: "choice a 'as' value of ui.switch.on has type 'as', expected 'b'")
    }

    // MARK: Checking values

    func testATypeMismatchNamesBothTypes() throws {
        assertRefused(try onSwitch, .string("on"), code: .invalidArgs, message: "property ui.switch.on has type 'b', got 's'")
        assertRefused(try onSwitch, .variant(.boolean(true)), code: .invalidArgs, message: "property ui.switch.on has type 'b', got 'v'")
        assertRefused(try count, .int64(1), code: .invalidArgs, message: "property x.count has type 'i', got 'x'")
        let list = try definition("x.list", .array(.string), .array(of: .string, []))
        assertRefused(list, .array(of: .int32, []), code: .invalidArgs, message: "property x.list has type 'as', got 'ai'")
        XCTAssertEqual(checkError(try onSwitch, .string("on"))?.name, "org.freedesktop.DBus.Error.InvalidArgs")
    }

    func testValuesInsideTheRangePass() throws {
        var definition = try count
        _ = try definition.apply(options: ["minimum": .int32(-1), "maximum": .int32(10)])
        for value: Int32 in [-1, 0, 10] {
            XCTAssertNoThrow(try definition.check(.int32(value), maximumSize: 1 << 20), "\(value)")
        }
    }

    func testValuesOutsideTheRangeAreRefused() throws {
        var definition = try count
        _ = try definition.apply(options: ["minimum": .int32(-1), "maximum": .int32(10)])
        assertRefused(definition, .int32(11), code: .outOfRange, message: "value 11 for x.count is out of range -1…10")
        assertRefused(definition, .int32(-2), code: .outOfRange, message: "value -2 for x.count is out of range -1…10")
        XCTAssertEqual(checkError(definition, .int32(.max))?.name, "org.propbus.PropBus1.Error.OutOfRange")

        var ratio = try self.definition("x.ratio", .double, .double(0))
        _ = try ratio.apply(options: ["minimum": .double(0), "maximum": .double(1)])
        assertRefused(ratio, .double(1.5), code: .outOfRange, message: "value 1.5 for x.ratio is out of range 0.0…1.0")
        assertRefused(ratio, .double(-.infinity), code: .outOfRange, message: "value -inf for x.ratio is out of range 0.0…1.0")
    }

    func testAnOpenEndedRangeShowsOneBound() throws {
        var definition = try count
        _ = try definition.apply(options: ["minimum": .int32(0)])
        XCTAssertNoThrow(try definition.check(.int32(.max), maximumSize: 1 << 20))
        guard let error = checkError(definition, .int32(-1)) else { return }
        XCTAssertEqual(error.code, .outOfRange)
        XCTAssertEqual(error.message, "value -1 for x.count is out of range 0…")
    }

    func testNaNIsOutsideEveryRange() throws {
        var ratio = try definition("x.ratio", .double, .double(0))
        _ = try ratio.apply(options: ["minimum": .double(0), "maximum": .double(1)])
        XCTAssertEqual(checkError(ratio, .double(.nan))?.code, .outOfRange)
    }

    func testSixtyFourBitBoundsAreExact() throws {
        // 2^53 + 1 rounds to 2^53 as a Double, so a Double comparison lets it past a 2^53 maximum.
        var big = try definition("x.big", .uint64, .uint64(0))
        _ = try big.apply(options: ["maximum": .uint64(1 << 53)])
        XCTAssertNoThrow(try big.check(.uint64(1 << 53), maximumSize: 1 << 20))
        XCTAssertEqual(checkError(big, .uint64((1 << 53) + 1))?.code, .outOfRange)
    }

    func testChoicesRestrictValues() throws {
        var definition = try count
        _ = try definition.apply(options: ["choices": .array(of: .variant, [.variant(.int32(1)), .variant(.int32(2))])])
        XCTAssertNoThrow(try definition.check(.int32(2), maximumSize: 1 << 20))
        assertRefused(definition, .int32(3), code: .invalidValue, message: "value 3 for x.count is not one of: 1, 2")

        var mode = try self.definition("ui.mode", .string, .string("light"))
        _ = try mode.apply(options: ["choices": .array(of: .variant, [.variant(.string("light")), .variant(.string("dark"))])])
        assertRefused(mode, .string("blue"), code: .invalidValue, message: "value 'blue' for ui.mode is not one of: 'light', 'dark'")
        XCTAssertEqual(checkError(mode, .string("blue"))?.name, "org.propbus.PropBus1.Error.InvalidValue")
    }

    func testValuesLargerThanTheLimitAreRefused() throws {
        let text = try definition("x.text", .string, .string(""))
        // A string takes 4 bytes of length, its UTF-8 and a NUL.
        XCTAssertNoThrow(try text.check(.string("12345"), maximumSize: 10))
        assertRefused(text, .string("123456"), maximumSize: 10, code: .limitsExceeded,
                      message: "value for x.text is 11 bytes; the limit is 10 bytes")
        let blob = try definition("x.blob", .array(.byte), .bytes([]))
        assertRefused(blob, .bytes(Array(repeating: 0, count: 1 << 20)), code: .limitsExceeded,
                      message: "value for x.blob is 1048580 bytes; the limit is 1048576 bytes")
        XCTAssertEqual(checkError(blob, .bytes(Array(repeating: 0, count: 1 << 20)))?.name, "org.propbus.PropBus1.Error.LimitsExceeded")
    }

    func testInvalidValuesOfTheRightTypeAreRefused() throws {
        let text = try definition("x.text", .string, .string(""))
        assertRefused(text, .string("a\u{0}b"), code: .invalidValue, message: "invalid value for x.text: string contains a NUL byte")
        let path = try definition("x.path", .objectPath, .objectPath("/"))
        assertRefused(path, .objectPath("not/a/path"), code: .invalidValue, message: "invalid value for x.path: 'not/a/path' is not a valid object path")
        let list = try definition("x.list", .array(.string), .array(of: .string, []))
        assertRefused(list, .array(element: .string, [.int32(1)]), code: .invalidValue,
                      message: "invalid value for x.list: array of 's' holds a 'i'")
    }

    // MARK: Secrets in messages

    func testASecretKeysRefusedValueIsNeverQuotedButWhatWasExpectedIs() throws {
        var pin = try definition("vault.pin", .string, .string("a"))
        _ = try pin.apply(options: ["secret": .boolean(true), "choices": .array(of: .variant, [.variant(.string("a")), .variant(.string("b"))])])
        var level = try definition("vault.level", .int32, .int32(0))
        _ = try level.apply(options: ["secret": .boolean(true), "minimum": .int32(0), "maximum": .int32(10)])
        for (definition, value, expected) in [(pin, DBusValue.string("hunter2-token"), "'a', 'b'"), (level, .int32(424242), "0…10")] {
            XCTAssertThrowsError(try definition.check(value, maximumSize: 1 << 20)) { error in
                let message = (error as? PropBusError)?.message ?? "\(error)"
                XCTAssertFalse(message.contains("hunter2") || message.contains("424242"), message)
                for piece in ["value refused", definition.key.text, expected] { XCTAssertTrue(message.contains(piece), "\(message) lacks \(piece)") }
            }
        }
        // Not secret: the value is the caller's own, and quoting it helps.
        var open = try definition("ui.mode", .string, .string("a"))
        _ = try open.apply(options: ["choices": .array(of: .variant, [.variant(.string("a"))])])
        XCTAssertThrowsError(try open.check(.string("zz"), maximumSize: 1 << 20)) { error in
            XCTAssertTrue("\(error)".contains("'zz'"), "\(error)")
        }
    }
}

