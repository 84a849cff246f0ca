import DBusValues
import XCTest

@testable import PropBus

final class ExpressionTests: XCTestCase {
    // MARK: Helpers

    private let keys: [String: DBusValue] = [
        "viewmodel.searchText": .string("hello"),
        "settings.count": .int32(7),
        "settings.ratio": .double(0.5),
        "settings.flag": .boolean(true),
        "settings.byte": .byte(200),
        "settings.big": .uint64(UInt64(Int64.max)),
        "settings.huge": .uint64(UInt64.max),
        "settings.anything": .variant(.string("wrapped")),
        "settings.path": .objectPath("/a/b"),
        "settings.names": .array(of: .string, [.string("a"), .string("b")]),
        "settings.bytes": .bytes([1, 2, 3]),
        "settings.mixed": .array(of: .variant, [.variant(.int32(1)), .variant(.string("x"))]),
        "settings.table": .dictionary(key: .string, value: .int32, [DictionaryEntry(.string("k"), .int32(1))]),
        "1a.b": .int64(11),
    ]

    private func evaluate(_ text: String, value: DBusValue? = nil, file: StaticString = #filePath, line: UInt = #line) throws -> DBusValue {
        let expression = try Expression(parsing: text)
        return try expression.evaluate(value: value) { self.keys[$0] }
    }

    private func assertEvaluates(_ text: String, _ expected: DBusValue, value: DBusValue? = nil, file: StaticString = #filePath, line: UInt = #line) {
        do {
            let result = try evaluate(text, value: value)
            XCTAssertEqual(result, expected, text, file: file, line: line)
        } catch {
            XCTFail("\(text): \(error)", file: file, line: line)
        }
    }

    /// The message of the error `text` raises when parsed, checking its code.
    private func parseError(_ text: String, file: StaticString = #filePath, line: UInt = #line) -> String {
        do {
            _ = try Expression(parsing: text)
            XCTFail("'\(text)' parsed", file: file, line: line)
            return ""
        } catch {
            XCTAssertEqual(error.code, .invalidExpression, file: file, line: line)
            return error.message
        }
    }

    /// The message of the error `text` raises when evaluated, checking its code.
    private func evaluationError(_ text: String, value: DBusValue? = nil, file: StaticString = #filePath, line: UInt = #line) -> String {
        do {
            let result = try evaluate(text, value: value)
            XCTFail("'\(text)' evaluated to \(result)", file: file, line: line)
            return ""
        } catch let error as PropBusError {
            XCTAssertEqual(error.code, .transformFailed, "\(text): \(error)", file: file, line: line)
            return error.message
        } catch {
            XCTFail("\(text): \(error)", file: file, line: line)
            return ""
        }
    }

    private func assertEvaluationFails(_ text: String, value: DBusValue? = nil, containing detail: String, file: StaticString = #filePath, line: UInt = #line) {
        let message = evaluationError(text, value: value, file: file, line: line)
        XCTAssertTrue(message.contains(detail), "\(text): \(message)", file: file, line: line)
    }

    private func assertParseFails(_ text: String, with expected: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(parseError(text, file: file, line: line), expected, text, file: file, line: line)
    }

    private func type(_ text: String, value: DBusType? = nil, file: StaticString = #filePath, line: UInt = #line) throws -> DBusType? {
        try Expression(parsing: text).resultType(valueType: value) { self.keys[$0]?.type }
    }

    // MARK: docs/expressions.md examples

    func testOnOffMapsToOneZeroBothWays() throws {
        let toKey = try Expression(parsing: #"value == "1" ? "On" : "Off""#)
        let toTarget = try Expression(parsing: #"value == "On" ? "1" : "0""#)
        let none: (String) -> DBusValue? = { _ in nil }
        XCTAssertEqual(try toKey.evaluate(value: .string("1"), lookup: none), .string("On"))
        XCTAssertEqual(try toKey.evaluate(value: .string("0"), lookup: none), .string("Off"))
        XCTAssertEqual(try toTarget.evaluate(value: .string("On"), lookup: none), .string("1"))
        XCTAssertEqual(try toTarget.evaluate(value: .string("Off"), lookup: none), .string("0"))
        // The round trip is the identity on both sides.
        for side in ["0", "1"] {
            let mapped = try toKey.evaluate(value: .string(side), lookup: none)
            XCTAssertEqual(try toTarget.evaluate(value: mapped, lookup: none), .string(side))
        }
        XCTAssertEqual(try toKey.resultType(valueType: .string) { _ in nil }, .string)
        XCTAssertEqual(try toTarget.resultType(valueType: .string) { _ in nil }, .string)
        XCTAssertTrue(toKey.usesValue)
        XCTAssertEqual(toKey.referencedKeys, [])
    }

    func testSearchTextLengthPredicate() throws {
        let predicate = try Expression(parsing: "length(viewmodel.searchText) > 3")
        XCTAssertEqual(predicate.referencedKeys, ["viewmodel.searchText"])
        XCTAssertFalse(predicate.usesValue)
        XCTAssertEqual(try predicate.evaluate(value: nil) { $0 == "viewmodel.searchText" ? .string("swift") : nil }, .boolean(true))
        XCTAssertEqual(try predicate.evaluate(value: nil) { $0 == "viewmodel.searchText" ? .string("abc") : nil }, .boolean(false))
        XCTAssertEqual(try predicate.resultType(valueType: nil) { $0 == "viewmodel.searchText" ? .string : nil }, .boolean)
        // An unknown key type leaves the result known: a comparison is always 'b'.
        XCTAssertEqual(try predicate.resultType(valueType: nil) { _ in nil }, .boolean)
    }

    func testTextAndDescriptionAreTheSourceAndIdentity() throws {
        let a = try Expression(parsing: "1 + 2")
        XCTAssertEqual(a.text, "1 + 2")
        XCTAssertEqual(a.description, "1 + 2")
        XCTAssertEqual(a, try Expression(parsing: "1 + 2"))
        XCTAssertNotEqual(a, try Expression(parsing: "1+2"))
        XCTAssertEqual(Set([a, try Expression(parsing: "1 + 2")]).count, 1)
    }

    // MARK: Literals and names

    func testLiterals() {
        assertEvaluates("true", .boolean(true))
        assertEvaluates("false", .boolean(false))
        assertEvaluates("42", .int64(42))
        assertEvaluates("0", .int64(0))
        assertEvaluates("9223372036854775807", .int64(.max))
        assertEvaluates("-9223372036854775808", .int64(.min))
        assertEvaluates("1.5", .double(1.5))
        assertEvaluates("2e3", .double(2000))
        assertEvaluates("2.5E-1", .double(0.25))
        assertEvaluates(#""double""#, .string("double"))
        assertEvaluates("'single'", .string("single"))
        assertEvaluates(#"'it\'s'"#, .string("it's"))
        assertEvaluates(#""say \"hi\"""#, .string("say \"hi\""))
        assertEvaluates(#""a\\b\nc\td\r""#, .string("a\\b\nc\td\r"))
        assertEvaluates(#""\u00e9\u20AC""#, .string("é€"))
        assertEvaluates(#""'""#, .string("'"))
        assertEvaluates("'\"'", .string("\""))
        assertEvaluates("\"héllo ✓\"", .string("héllo ✓"))
        assertEvaluates("''", .string(""))
    }

    func testKeysAndValue() throws {
        assertEvaluates("settings.count", .int64(7))
        assertEvaluates("settings.byte", .int64(200))
        assertEvaluates("settings.ratio", .double(0.5))
        assertEvaluates("settings.anything", .string("wrapped"))
        assertEvaluates("settings.path", .string("/a/b"))
        assertEvaluates("settings.names", .array(of: .string, [.string("a"), .string("b")]))
        assertEvaluates("1a.b", .int64(11))
        assertEvaluates("value", .int64(-3), value: .int16(-3))
        assertEvaluates("value", .string("in"), value: .variant(.variant(.string("in"))))
        assertEvaluates("settings.big", .int64(.max))
        assertEvaluationFails("settings.huge", containing: "18446744073709551615 ('t')")
        assertEvaluationFails("settings.nope", containing: "unknown key settings.nope")
        assertEvaluationFails("value", containing: "'value' is not available")

        let expression = try Expression(parsing: "value.x + settings.count * ui.switch.on + value")
        XCTAssertEqual(expression.referencedKeys, ["value.x", "settings.count", "ui.switch.on"])
        XCTAssertTrue(expression.usesValue)
    }

    // MARK: Operators

    func testPrecedence() {
        assertEvaluates("1 + 2 * 3", .int64(7))
        assertEvaluates("(1 + 2) * 3", .int64(9))
        assertEvaluates("7 - 4 % 3", .int64(6))
        assertEvaluates("-2 * 3", .int64(-6))
        assertEvaluates("-(2 + 3) * 2", .int64(-10))
        assertEvaluates("!true || true", .boolean(true))
        assertEvaluates("!(true || true)", .boolean(false))
        assertEvaluates("1 + 1 == 2", .boolean(true))
        assertEvaluates("1 < 2 == 2 < 3", .boolean(true))
        assertEvaluates("true || false && false", .boolean(true))
        assertEvaluates("(true || false) && false", .boolean(false))
        assertEvaluates("1 < 2 && 3 > 4 || 5 >= 5", .boolean(true))
        assertEvaluates("true ? 1 : 2 + 10", .int64(1))
        assertEvaluates("false ? 1 : 2 + 10", .int64(12))
        assertEvaluates("1 > 2 || true ? \"y\" : \"n\"", .string("y"))
    }

    func testAssociativity() {
        assertEvaluates("10 - 3 - 2", .int64(5))
        assertEvaluates("100 / 10 / 5", .int64(2))
        assertEvaluates("17 % 10 % 4", .int64(3))
        assertEvaluates("2 * 3 % 4", .int64(2))
        assertEvaluates("--5", .int64(5))
        assertEvaluates("!!true", .boolean(true))
        assertEvaluates("\"a\" + \"b\" + \"c\"", .string("abc"))
        // ?: is right-associative: a ? b : (c ? d : e).
        assertEvaluates("false ? 1 : true ? 2 : 3", .int64(2))
        assertEvaluates("true ? false ? 1 : 2 : 3", .int64(2))
        assertEvaluates("false ? 1 : false ? 2 : 3", .int64(3))
    }

    func testIntegerArithmetic() {
        assertEvaluates("7 / 2", .int64(3))
        assertEvaluates("-7 / 2", .int64(-3))
        assertEvaluates("-7 % 3", .int64(-1))
        assertEvaluates("settings.count * settings.byte", .int64(1400))
        assertEvaluates("value + 1", .int64(256), value: .byte(255))
        assertEvaluates("value - 1", .int64(Int64(UInt32.max) - 1), value: .uint32(.max))
        assertEvaluationFails("9223372036854775807 + 1", containing: "overflows")
        assertEvaluationFails("-9223372036854775807 - 2", containing: "overflows")
        assertEvaluationFails("4611686018427387904 * 2", containing: "overflows")
        assertEvaluationFails("-value", value: .int64(.min), containing: "overflows")
        assertEvaluationFails("value / -1", value: .int64(.min), containing: "overflows")
        assertEvaluationFails("value % -1", value: .int64(.min), containing: "overflows")
        assertEvaluationFails("1 / 0", containing: "division by zero")
        assertEvaluationFails("1 % (2 - 2)", containing: "division by zero")
        assertEvaluationFails("1.5 / 0", containing: "division by zero")
    }

    func testMixedNumbersBecomeDouble() {
        assertEvaluates("1 + 0.5", .double(1.5))
        assertEvaluates("settings.ratio * 4", .double(2))
        assertEvaluates("7 / 2.0", .double(3.5))
        assertEvaluates("7.5 % 2", .double(1.5))
        assertEvaluates("-settings.ratio", .double(-0.5))
    }

    func testComparisons() {
        assertEvaluates("1 < 2", .boolean(true))
        assertEvaluates("2 <= 2", .boolean(true))
        assertEvaluates("3 > 4", .boolean(false))
        assertEvaluates("4 >= 5", .boolean(false))
        assertEvaluates("1 == 1.0", .boolean(true))
        assertEvaluates("1 != 1.5", .boolean(true))
        assertEvaluates("1 < 1.5", .boolean(true))
        assertEvaluates("2 > 1.5", .boolean(true))
        // Exact across int and double, with no rounding of the integer.
        assertEvaluates("9223372036854775807 < 9223372036854775808.0", .boolean(true))
        assertEvaluates("9007199254740993 > 9007199254740992.0", .boolean(true))
        assertEvaluates("settings.count == 7", .boolean(true))
        assertEvaluates("value == 300", .boolean(true), value: .uint16(300))
        assertEvaluates("\"abc\" < \"abd\"", .boolean(true))
        assertEvaluates("'b' >= 'a'", .boolean(true))
        assertEvaluates("\"x\" == 'x'", .boolean(true))
        assertEvaluates("true != false", .boolean(true))
        assertEvaluates("settings.names == settings.names", .boolean(true))
        assertEvaluates("settings.path == '/a/b'", .boolean(true))
        assertEvaluationFails("\"1\" == 1", containing: "cannot compare 'string' with 'int64'")
        assertEvaluationFails("true != 0", containing: "cannot compare 'boolean' with 'int64'")
        assertEvaluationFails("settings.names == settings.bytes", containing: "cannot compare 'array<string>' with 'array<byte>'")
        assertEvaluationFails("true < false", containing: "cannot compare 'boolean' with 'boolean' using '<'")
        assertEvaluationFails("'a' > 1", containing: "cannot compare 'string' with 'int64' using '>'")
    }

    func testStringConcatenation() {
        assertEvaluates("\"count: \" + string(settings.count)", .string("count: 7"))
        assertEvaluates("viewmodel.searchText + '!'", .string("hello!"))
        assertEvaluationFails("'n' + 1", containing: "cannot add 'string' and 'int64'; use string()")
        assertEvaluationFails("1 + 'n'", containing: "cannot add 'int64' and 'string'")
        assertEvaluationFails("true + 1", containing: "cannot add 'boolean' and 'int64'")
        assertEvaluationFails("'a' - 'b'", containing: "cannot subtract 'string' from 'string'")
        assertEvaluationFails("'a' * 2", containing: "cannot multiply 'string' and 'int64'")
        assertEvaluationFails("true / 2", containing: "cannot divide 'boolean' by 'int64'")
        assertEvaluationFails("-'a'", containing: "cannot negate 'string'")
        assertEvaluationFails("!1", containing: "'!' expects 'boolean', got 'int64'")
    }

    func testLogicalOperatorsShortCircuit() {
        assertEvaluates("false && unknown.key", .boolean(false))
        assertEvaluates("true || unknown.key", .boolean(true))
        assertEvaluates("false && 1 / 0 == 1", .boolean(false))
        assertEvaluates("true ? 1 : unknown.key", .int64(1))
        assertEvaluates("false ? unknown.key : 2", .int64(2))
        assertEvaluates("true && settings.flag", .boolean(true))
        assertEvaluationFails("true && unknown.key", containing: "unknown key unknown.key")
        assertEvaluationFails("1 && true", containing: "'&&' expects 'boolean' operands, got 'int64'")
        assertEvaluationFails("false || 's'", containing: "'||' expects 'boolean' operands, got 'string'")
        assertEvaluationFails("'yes' ? 1 : 2", containing: "the condition of '?:' must be 'boolean', got 'string'")
    }

    // MARK: Functions

    func testLength() {
        assertEvaluates("length('héllo')", .int64(5))
        assertEvaluates("length('')", .int64(0))
        assertEvaluates("length(settings.names)", .int64(2))
        assertEvaluates("length(settings.bytes)", .int64(3))
        assertEvaluates("length(settings.table)", .int64(1))
        assertEvaluationFails("length(true)", containing: "length() expects a string, an array or a dict, got 'boolean'")
        assertEvaluationFails("length(3)", containing: "got 'int64'")
    }

    func testCaseAndTrim() {
        assertEvaluates("lower('MiXed')", .string("mixed"))
        assertEvaluates("upper('MiXed')", .string("MIXED"))
        assertEvaluates("trim('  padded \\n\\t')", .string("padded"))
        assertEvaluates("trim('   ')", .string(""))
        assertEvaluationFails("lower(1)", containing: "lower() expects a string, got 'int64'")
        assertEvaluationFails("trim(settings.names)", containing: "trim() expects a string, got 'array<string>'")
    }

    func testStringFunction() {
        assertEvaluates("string(42)", .string("42"))
        assertEvaluates("string(-1.5)", .string("-1.5"))
        assertEvaluates("string(true)", .string("true"))
        assertEvaluates("string('s')", .string("s"))
        assertEvaluates("string(value)", .string("255"), value: .byte(255))
        assertEvaluates("string(settings.names)", .string("[\"a\",\"b\"]"))
    }

    func testIntFunction() {
        assertEvaluates("int('42')", .int64(42))
        assertEvaluates("int(' -7 ')", .int64(-7))
        assertEvaluates("int(3.9)", .int64(3))
        assertEvaluates("int(-3.9)", .int64(-3))
        assertEvaluates("int(true)", .int64(1))
        assertEvaluates("int(5)", .int64(5))
        assertEvaluationFails("int('12abc')", containing: "int() cannot read \"12abc\" as an integer")
        assertEvaluationFails("int('')", containing: "cannot read")
        assertEvaluationFails("int('3.5')", containing: "cannot read")
        assertEvaluationFails("int(1e30)", containing: "int() cannot convert")
        assertEvaluationFails("int(settings.names)", containing: "int() expects a number, a string or a boolean, got 'array<string>'")
    }

    func testDoubleFunction() {
        assertEvaluates("double(2)", .double(2))
        assertEvaluates("double('2.5')", .double(2.5))
        assertEvaluates("double(' 1e2 ')", .double(100))
        assertEvaluates("double(false)", .double(0))
        assertEvaluationFails("double('two')", containing: "double() cannot read \"two\" as a number")
    }

    func testBoolFunction() {
        for word in ["true", "1", "yes", "on", "ON", " Yes ", "True"] {
            assertEvaluates("bool('\(word)')", .boolean(true))
        }
        for word in ["false", "0", "no", "off", "OFF", "False"] {
            assertEvaluates("bool('\(word)')", .boolean(false))
        }
        assertEvaluates("bool(1)", .boolean(true))
        assertEvaluates("bool(0)", .boolean(false))
        assertEvaluates("bool(true)", .boolean(true))
        assertEvaluationFails("bool('maybe')", containing: "bool() cannot read \"maybe\" as a boolean")
        assertEvaluationFails("bool(2)", containing: "bool() expects 0 or 1, got 2")
        assertEvaluationFails("bool(0.5)", containing: "bool() expects an integer, a string or a boolean, got 'double'")
    }

    func testContainsStartsWithEndsWith() {
        assertEvaluates("contains('haystack', 'st')", .boolean(true))
        assertEvaluates("contains('haystack', 'needle')", .boolean(false))
        assertEvaluates("contains(settings.names, 'b')", .boolean(true))
        assertEvaluates("contains(settings.names, 'z')", .boolean(false))
        assertEvaluates("contains(settings.bytes, 2)", .boolean(true))
        assertEvaluates("contains(settings.bytes, 2.0)", .boolean(true))
        assertEvaluates("contains(settings.bytes, 9)", .boolean(false))
        assertEvaluates("contains(settings.mixed, 'x')", .boolean(true))
        assertEvaluates("contains(settings.mixed, 1)", .boolean(true))
        assertEvaluates("contains(settings.mixed, true)", .boolean(false))
        assertEvaluates("contains(settings.table, 'k')", .boolean(true))
        assertEvaluates("startsWith('prefix', 'pre')", .boolean(true))
        assertEvaluates("startsWith('prefix', 'fix')", .boolean(false))
        assertEvaluates("endsWith('prefix', 'fix')", .boolean(true))
        assertEvaluates("endsWith('prefix', '')", .boolean(true))
        assertEvaluationFails("contains('abc', 1)", containing: "contains() expects")
        assertEvaluationFails("contains(settings.names, 1)", containing: "got 'array<string>' and 'int64'")
        assertEvaluationFails("contains(1, 1)", containing: "contains() expects")
        assertEvaluationFails("startsWith(1, 'a')", containing: "startsWith() expects two strings, got 'int64' and 'string'")
        assertEvaluationFails("endsWith('a', true)", containing: "endsWith() expects two strings")
    }

    func testMinAndMax() {
        assertEvaluates("min(3, 1, 2)", .int64(1))
        assertEvaluates("max(3, 1, 2)", .int64(3))
        assertEvaluates("min(1, 2.5)", .double(1))
        assertEvaluates("max(1, 2.5)", .double(2.5))
        assertEvaluates("max(settings.count, 3)", .int64(7))
        assertEvaluates("min('b', 'a', 'c')", .string("a"))
        assertEvaluates("max('b', 'a', 'c')", .string("c"))
        assertEvaluationFails("min(1, 'a')", containing: "min() expects numbers or strings, got 'int64' and 'string'")
        assertEvaluationFails("max(true, false)", containing: "max() expects numbers or strings")
    }

    // MARK: Parse errors

    func testParseErrorsNameTheColumnAndWhatWasExpected() {
        assertParseFails("length(viewmodel.searchText", with: "column 28: expected ',' or ')' after an argument of length, found end of input")
        assertParseFails("(1 + 2", with: "column 7: expected ')' to close the '(' at column 1, found end of input")
        assertParseFails("1 +", with: "column 4: expected a value, a key, a function call or '(', found end of input")
        assertParseFails("", with: "column 1: expected a value, a key, a function call or '(', found end of input")
        assertParseFails("1 2", with: "column 3: expected an operator or end of input, found number 2")
        assertParseFails("value ? 1", with: "column 10: expected ':' for the '?' at column 7, found end of input")
        assertParseFails("value = 1", with: "column 7: expected '==', found '='")
        assertParseFails("a.b & c.d", with: "column 5: expected '&&', found '&'")
        assertParseFails("a.b | c.d", with: "column 5: expected '||', found '|'")
        assertParseFails("1 # 2", with: "column 3: unexpected character '#'")
        assertParseFails("\"open", with: "column 6: expected \" to close the string started at column 1, found end of input")
        assertParseFails("'bad \\q'", with: "column 6: unknown escape '\\q'; the escapes are \\\" \\' \\\\ \\n \\t \\r \\uXXXX")
        assertParseFails("'\\u12'", with: "column 2: expected 4 hex digits after '\\u', found '\\''")
        assertParseFails("'\\uD800'", with: "column 2: \\uD800 is not a Unicode scalar value (a surrogate)")
        assertParseFails("9223372036854775808", with: "column 1: integer 9223372036854775808 is out of range -9223372036854775808...9223372036854775807")
        assertParseFails("1e999", with: "column 1: number 1e999 is out of range")
        assertParseFails("12abc", with: "column 1: malformed number '12abc'")
        assertParseFails("1e + 1", with: "column 1: malformed number '1e'")
        // A digit-led word with a dot that follows the key rules is a key, not a number.
        assertEvaluationFails("1.e5", containing: "unknown key 1.e5")
        assertEvaluationFails("3.x", containing: "unknown key 3.x")
        assertParseFails("searchText", with: "column 1: unknown name 'searchText': a key is group.name, and 'value' is the incoming value")
        assertParseFails("x + (", with: "column 1: unknown name 'x': a key is group.name, and 'value' is the incoming value")
        assertParseFails("1 + )", with: "column 5: expected a value, a key, a function call or '(', found ')'")
        assertParseFails("é", with: "column 1: unexpected character 'é'")
        XCTAssertTrue(parseError("a..b").hasPrefix("column 1: invalid key 'a..b': it has an empty group segment"))
        XCTAssertTrue(parseError("1 + a.1b").hasPrefix("column 5: invalid key 'a.1b': the name must not start with a digit"))
    }

    func testUnknownFunctionAndWrongArity() {
        assertParseFails("size('a')", with: "column 1: unknown function 'size'; the functions are length, lower, upper, trim, string, int, double, bool, contains, startsWith, endsWith, min, max")
        assertParseFails("1 + length()", with: "column 5: length() expects 1 argument, got 0")
        assertParseFails("length('a', 'b')", with: "column 1: length() expects 1 argument, got 2")
        assertParseFails("contains('a')", with: "column 1: contains() expects 2 arguments, got 1")
        assertParseFails("min(1)", with: "column 1: min() expects at least 2 arguments, got 1")
        assertParseFails("length('a',)", with: "column 12: expected a value, a key, a function call or '(', found ')'")
    }

    func testLimits() {
        XCTAssertEqual(parseError(String(repeating: "1+", count: 2100) + "1"),
                       "the expression is 4201 bytes long; the limit is 4096")
        XCTAssertTrue(parseError(String(repeating: "(", count: 300) + "1" + String(repeating: ")", count: 300))
            .hasSuffix("the expression nests deeper than 256 levels"))
        XCTAssertTrue(parseError(String(repeating: "-", count: 300) + "a.b").hasSuffix("nests deeper than 256 levels"))
        // A long left-associative chain grows the tree without recursing in the parser.
        XCTAssertTrue(parseError(String(repeating: "1+", count: 300) + "1").hasSuffix("nests deeper than 256 levels"))
        XCTAssertTrue(parseError(String(repeating: "true?1:", count: 300) + "1").hasSuffix("nests deeper than 256 levels"))
        assertEvaluates(String(repeating: "1+", count: 200) + "1", .int64(201))
        assertEvaluates(String(repeating: "(", count: 200) + "1" + String(repeating: ")", count: 200), .int64(1))
    }

    // MARK: Static types

    func testResultTypes() throws {
        XCTAssertEqual(try type("value == \"1\" ? \"On\" : \"Off\"", value: .string), .string)
        XCTAssertEqual(try type("length(viewmodel.searchText) > 3"), .boolean)
        XCTAssertEqual(try type("value + 1", value: .int32), .int64)
        XCTAssertEqual(try type("value + 1", value: .double), .double)
        XCTAssertEqual(try type("value + 1.5", value: .byte), .double)
        XCTAssertEqual(try type("value", value: .as), .array(.string))
        XCTAssertEqual(try type("value", value: .objectPath), .string)
        XCTAssertEqual(try type("int(value)", value: .variant), .int64)
        XCTAssertEqual(try type("string(value) + '!'", value: .variant), .string)
        XCTAssertEqual(try type("min(1, 2)"), .int64)
        XCTAssertEqual(try type("min(1, 2.0)"), .double)
        XCTAssertEqual(try type("settings.anything"), nil)
        XCTAssertEqual(try type("value + 1", value: .variant), nil)
        XCTAssertEqual(try type("value + 'a'", value: .variant), .string)
        XCTAssertEqual(try type("true ? 1 : 'one'"), nil)
        XCTAssertEqual(try type("true ? 1 : 1.0"), nil)
        XCTAssertEqual(try type("nope.key == 1"), .boolean)
        XCTAssertEqual(try type("false && nope.key"), .boolean)
        XCTAssertEqual(try type("value"), nil)
    }

    func testStaticTypeErrorsNameTheColumn() {
        func staticError(_ text: String, value: DBusType?) -> String {
            do {
                let result = try type(text, value: value)
                XCTFail("\(text) typed as \(String(describing: result))")
                return ""
            } catch let error as PropBusError {
                XCTAssertEqual(error.code, .invalidExpression, text)
                return error.message
            } catch {
                XCTFail("\(error)")
                return ""
            }
        }
        XCTAssertEqual(staticError("value + 1", value: .boolean), "column 7: cannot add 'boolean' and 'int64'")
        XCTAssertEqual(staticError("value == 1", value: .string), "column 7: cannot compare 'string' with 'int64'")
        XCTAssertEqual(staticError("length(value)", value: .int32), "column 1: length() expects a string, an array or a dict, got 'int64'")
        XCTAssertEqual(staticError("value ? 1 : 2", value: .string), "column 7: the condition of '?:' must be 'boolean', got 'string'")
        XCTAssertEqual(staticError("!value", value: .double), "column 1: '!' expects 'boolean', got 'double'")
        XCTAssertEqual(staticError("x.y + true", value: nil), "column 5: cannot add a value of unknown type and 'boolean'")
        XCTAssertEqual(staticError("1 + settings.flag", value: nil), "column 3: cannot add 'int64' and 'boolean'")
        XCTAssertEqual(staticError("false && value + 1", value: .boolean), "column 16: cannot add 'boolean' and 'int64'")
    }

    // MARK: convert()

    func testConvertNarrowsIntegersWithRangeChecks() throws {
        XCTAssertEqual(try Expression.convert(.int64(1), to: .int32), .int32(1))
        XCTAssertEqual(try Expression.convert(.int64(255), to: .byte), .byte(255))
        XCTAssertEqual(try Expression.convert(.int64(-32768), to: .int16), .int16(-32768))
        XCTAssertEqual(try Expression.convert(.int64(65535), to: .uint16), .uint16(65535))
        XCTAssertEqual(try Expression.convert(.int64(.max), to: .uint64), .uint64(UInt64(Int64.max)))
        XCTAssertEqual(try Expression.convert(.int64(.min), to: .int64), .int64(.min))
        XCTAssertEqual(try Expression.convert(.int64(4_294_967_295), to: .uint32), .uint32(.max))
        XCTAssertEqual(try Expression.convert(.uint64(.max), to: .uint64), .uint64(.max))
        XCTAssertEqual(try Expression.convert(.int64(3), to: .double), .double(3))
        XCTAssertEqual(try Expression.convert(.double(4), to: .int32), .int32(4))
        XCTAssertEqual(try Expression.convert(.double(-0.0), to: .byte), .byte(0))

        func failure(_ value: DBusValue, _ type: DBusType) -> String {
            do {
                let converted = try Expression.convert(value, to: type)
                XCTFail("\(value) converted to \(converted)")
                return ""
            } catch {
                XCTAssertEqual(error.code, .transformFailed)
                return error.message
            }
        }
        XCTAssertEqual(failure(.int64(300), .byte), "300 does not fit 'byte' (0...255)")
        XCTAssertEqual(failure(.int64(-1), .byte), "-1 does not fit 'byte' (0...255)")
        XCTAssertEqual(failure(.int64(-1), .uint64), "-1 does not fit 'uint64' (0...18446744073709551615)")
        XCTAssertEqual(failure(.int64(32768), .int16), "32768 does not fit 'int16' (-32768...32767)")
        XCTAssertEqual(failure(.int64(-32769), .int16), "-32769 does not fit 'int16' (-32768...32767)")
        XCTAssertEqual(failure(.int64(Int64(Int32.max) + 1), .int32), "2147483648 does not fit 'int32' (-2147483648...2147483647)")
        XCTAssertEqual(failure(.uint64(.max), .int64), "18446744073709551615 does not fit 'int64' (-9223372036854775808...9223372036854775807)")
        XCTAssertTrue(failure(.double(1.5), .int32).contains("not a whole number; use int()"))
        XCTAssertTrue(failure(.double(.infinity), .int64).contains("does not fit 'int64'"))
        XCTAssertTrue(failure(.double(1e20), .int64).contains("does not fit 'int64'"))
    }

    func testConvertRefusesOtherKinds() throws {
        func failure(_ value: DBusValue, _ type: DBusType) -> String {
            do {
                let converted = try Expression.convert(value, to: type)
                XCTFail("\(value) converted to \(converted)")
                return ""
            } catch {
                XCTAssertEqual(error.code, .transformFailed)
                return error.message
            }
        }
        XCTAssertEqual(failure(.string("x"), .int32), "cannot convert 'string' to 'int32'; use int() to make a number")
        XCTAssertEqual(failure(.boolean(true), .string), "cannot convert 'boolean' to 'string'; use string() to make a string")
        XCTAssertEqual(failure(.int64(1), .boolean), "cannot convert 'int64' to 'boolean'; use bool() or a comparison to make a boolean")
        XCTAssertEqual(failure(.double(1), .string), "cannot convert 'double' to 'string'; use string() to make a string")
        XCTAssertEqual(failure(.string("1"), .double), "cannot convert 'string' to 'double'; use double() to make a number")
        XCTAssertEqual(failure(.array(of: .string, []), .string), "cannot convert 'array<string>' to 'string'; use string() to make a string")
        XCTAssertTrue(failure(.string("not a path"), .objectPath).contains("does not fit 'object_path'"))
        XCTAssertTrue(failure(.string("(("), .signature).contains("does not fit 'signature'"))
        XCTAssertEqual(failure(.array(of: .int32, [.int32(256)]), .array(.byte)), "256 does not fit 'byte' (0...255)")
    }

    func testConvertPassesThroughWrapsAndUnwraps() throws {
        XCTAssertEqual(try Expression.convert(.string("s"), to: .string), .string("s"))
        XCTAssertEqual(try Expression.convert(.boolean(true), to: .boolean), .boolean(true))
        XCTAssertEqual(try Expression.convert(.string("s"), to: .variant), .variant(.string("s")))
        XCTAssertEqual(try Expression.convert(.variant(.int32(1)), to: .variant), .variant(.int32(1)))
        XCTAssertEqual(try Expression.convert(.variant(.int32(1)), to: .int64), .int64(1))
        XCTAssertEqual(try Expression.convert(.string("/a/b"), to: .objectPath), .objectPath("/a/b"))
        XCTAssertEqual(try Expression.convert(.objectPath("/a"), to: .string), .string("/a"))
        XCTAssertEqual(try Expression.convert(.string("a{sv}"), to: .signature), .signature("a{sv}"))
        XCTAssertEqual(try Expression.convert(.array(of: .int32, [.int32(1)]), to: .array(.int64)), .array(of: .int64, [.int64(1)]))
        XCTAssertEqual(try Expression.convert(.array(of: .int64, [.int64(7)]), to: .array(.byte)), .bytes([7]))
        XCTAssertEqual(try Expression.convert(.bytes([7]), to: .array(.int32)), .array(of: .int32, [.int32(7)]))
        let table = DBusValue.dictionary(key: .string, value: .int64, [DictionaryEntry(.string("k"), .int64(1))])
        XCTAssertEqual(try Expression.convert(table, to: .dictionary(key: .string, value: .uint16)),
                       .dictionary(key: .string, value: .uint16, [DictionaryEntry(.string("k"), .uint16(1))]))
        XCTAssertEqual(try Expression.convert(.structure([.int64(1), .string("a")]), to: .structure([.byte, .string])),
                       .structure([.byte(1), .string("a")]))
    }

    func testEvaluateThenConvertToTheTargetType() throws {
        let expression = try Expression(parsing: "value * 2")
        let result = try expression.evaluate(value: .int32(100)) { _ in nil }
        XCTAssertEqual(try Expression.convert(result, to: .int32), .int32(200))
        XCTAssertThrowsError(try Expression.convert(try expression.evaluate(value: .byte(200)) { _ in nil }, to: .byte))
    }
}

private extension DBusType {
    static let `as` = DBusType.array(.string)
}
