import JSON
import XCTest

final class JSONValueTests: XCTestCase {
    func testSixtyFourBitIntegersSurviveExactly() throws {
        let text = "[9223372036854775807,-9223372036854775808,18446744073709551615,9223372036854775808]"
        let value = try JSONValue.parse(text)
        XCTAssertEqual(value, [.integer(.max), .integer(.min), .unsignedInteger(.max), .unsignedInteger(1 << 63)])
        XCTAssertEqual(value.serialized(), text)
    }

    func testIntegersBeyondSixtyFourBitsBecomeDoubles() throws {
        XCTAssertEqual(try JSONValue.parse("18446744073709551616"), .double(0x1p64))
        XCTAssertEqual(try JSONValue.parse("-9223372036854775809"), .double(-0x1p63))
    }

    func testBooleansAndNumbersStayApart() throws {
        XCTAssertEqual(try JSONValue.parse("[true, 1, 1.0, false, 0]"), [.bool(true), .integer(1), .double(1), .bool(false), .integer(0)])
    }

    func testNumberNormalizesToTheCanonicalCase() {
        XCTAssertEqual(JSONValue.number(UInt64(5)), .integer(5))
        XCTAssertEqual(JSONValue.number(UInt64.max), .unsignedInteger(.max))
        XCTAssertEqual(JSONValue.number(Int8(-3)), .integer(-3))
    }

    func testObjectsKeepMemberOrderAndLookUpByKey() throws {
        let value = try JSONValue.parse(#"{"z": 1, "a": {"b": [true]}}"#)
        XCTAssertEqual(value.serialized(), #"{"z":1,"a":{"b":[true]}}"#)
        XCTAssertEqual(value["a"]?["b"]?[0], .bool(true))
        XCTAssertNil(value["missing"])
        XCTAssertEqual(value, ["z": 1, "a": ["b": [true]]])
    }

    func testPrettyOutputIndentsByTwoSpaces() {
        let value: JSONValue = ["name": "x", "list": [1, 2.5, nil], "empty": [], "none": [:]]
        XCTAssertEqual(value.serialized(pretty: true), """
            {
              "name": "x",
              "list": [
                1,
                2.5,
                null
              ],
              "empty": [],
              "none": {}
            }
            """)
    }

    func testNonFiniteDoublesPrintAsNull() {
        XCTAssertEqual(JSONValue.array([.double(.infinity), .double(.nan)]).serialized(), "[null,null]")
    }

    func testStrictGrammarIsEnforced() {
        let invalid = [
            "", " ", "01", "1.", ".5", "+1", "1e", "-", "tru", "nul", "[1,]", "[,1]", "{,}", #"{"a":1,}"#, #"{"a" 1}"#,
            "{a:1}", "'a'", "[1 2]", "1 2", #""abc"#, "NaN", "Infinity", "[", "]", "{", #"{"a":}"#, "1e999",
        ]
        for text in invalid {
            XCTAssertThrowsError(try JSONValue.parse(text), text)
        }
    }

    func testErrorsGiveTheByteOffset() {
        XCTAssertThrowsError(try JSONValue.parse("[1, 2 3]")) { error in
            XCTAssertEqual("\(error)", "invalid JSON at byte 6: expected ',' or ']', found '3'")
        }
        XCTAssertThrowsError(try JSONValue.parse(#"{"a": 1} x"#)) { error in
            XCTAssertEqual("\(error)", "invalid JSON at byte 9: unexpected 'x' after the JSON value")
        }
    }

    func testWhitespaceAroundTokensIsAllowed() throws {
        XCTAssertEqual(try JSONValue.parse(" \t\r\n{ \"a\" : [ 1 , 2 ] }\n"), ["a": [1, 2]])
    }

    // Moved here with the codec from the core's ValueText tests and the etcd client's gateway tests.
    func testVeryDeepJSONIsRefusedWithoutRecursingForever() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        XCTAssertThrowsError(try JSONValue.parse(deep)) { error in
            XCTAssertTrue("\(error)".contains("nested deeper than \(JSONValue.maximumDepth)"))
        }
        let fine = String(repeating: "[", count: JSONValue.maximumDepth) + String(repeating: "]", count: JSONValue.maximumDepth)
        XCTAssertNoThrow(try JSONValue.parse(fine))
    }

    func testUTF8BytesParseEscapesAndRefuseMalformedText() throws {
        let parsed = try JSONValue.parse(utf8: Array(#"{"a":"x\"\\\/\n\u00e9\ud83d\ude00","b":[true,false,null,-1.5e3]}"#.utf8))
        XCTAssertEqual(parsed["a"], .string("x\"\\/\n\u{e9}\u{1F600}"))
        XCTAssertEqual(parsed["b"], .array([.bool(true), .bool(false), .null, .double(-1500)]))
        let text = JSONValue.object([("k", .string("q\"\u{1}\n"))]).serialized()
        XCTAssertEqual(text, #"{"k":"q\"\u0001\n"}"#)
        XCTAssertEqual(try JSONValue.parse(utf8: Array(text.utf8)), .object([("k", .string("q\"\u{1}\n"))]))
        for bad in ["", "{", #"{"a":}"#, "[1,]", "tru", #"{"a":1} x"#, String(repeating: "[", count: 100)] {
            XCTAssertThrowsError(try JSONValue.parse(utf8: Array(bad.utf8)), bad)
        }
    }
}
