import DBusValues
import XCTest

@testable import PropBus

final class ValueTextTests: XCTestCase {
    // MARK: Helpers

    private func parse(_ text: String, _ signature: String, file: StaticString = #filePath, line: UInt = #line) -> DBusValue? {
        do {
            return try ValueText.parse(text, as: DBusType(parsing: signature))
        } catch {
            XCTFail("parse(\(text), as: \(signature)) threw \(error)", file: file, line: line)
            return nil
        }
    }

    private func failure(_ text: String, _ signature: String, file: StaticString = #filePath, line: UInt = #line) -> String {
        let type: DBusType
        do { type = try DBusType(parsing: signature) } catch {
            XCTFail("bad signature \(signature)", file: file, line: line)
            return ""
        }
        do {
            let value = try ValueText.parse(text, as: type)
            XCTFail("parse(\(text), as: \(signature)) returned \(value) instead of failing", file: file, line: line)
            return ""
        } catch {
            return error.message
        }
    }

    private func assertRoundTrip(_ value: DBusValue, file: StaticString = #filePath, line: UInt = #line) {
        let text = ValueText.format(value)
        do {
            let reread = try ValueText.parse(text, as: value.type)
            XCTAssertEqual(reread, value, "format gave \(text)", file: file, line: line)
        } catch {
            XCTFail("format gave \(text), which does not parse as \(value.signature): \(error)", file: file, line: line)
        }
        let json = ValueText.json(value)
        do {
            let reread = try ValueText.value(from: JSONValue.parse(json), as: value.type)
            XCTAssertEqual(reread, value, "json gave \(json)", file: file, line: line)
        } catch {
            XCTFail("json gave \(json), which does not read back as \(value.signature): \(error)", file: file, line: line)
        }
    }

    // MARK: Booleans

    func testBooleanAcceptsTheFriendlySpellingsInAnyCase() {
        for text in ["true", "TRUE", "True", "yes", "Yes", "on", "ON", "1", " true "] {
            XCTAssertEqual(parse(text, "b"), .boolean(true), text)
        }
        for text in ["false", "FALSE", "no", "No", "off", "Off", "0", "\tfalse\n"] {
            XCTAssertEqual(parse(text, "b"), .boolean(false), text)
        }
    }

    func testBooleanRejectsOtherWordsNamingWhatWasExpected() {
        XCTAssertEqual(failure("maybe", "b"), "expected a boolean (true/false) for type 'b', got 'maybe'")
        XCTAssertTrue(failure("", "b").contains("expected a boolean"))
        XCTAssertTrue(failure("2", "b").contains("expected a boolean"))
        XCTAssertTrue(failure("truee", "b").contains("'truee'"))
    }

    // MARK: Integers

    func testIntegersAcceptDecimalSignsAndHex() {
        XCTAssertEqual(parse("42", "i"), .int32(42))
        XCTAssertEqual(parse("-42", "i"), .int32(-42))
        XCTAssertEqual(parse("+42", "i"), .int32(42))
        XCTAssertEqual(parse(" 7 ", "u"), .uint32(7))
        XCTAssertEqual(parse("0x1F", "y"), .byte(31))
        XCTAssertEqual(parse("0XfF", "y"), .byte(255))
        XCTAssertEqual(parse("-0x8000", "n"), .int16(-32768))
        XCTAssertEqual(parse("-0", "q"), .uint16(0))
        XCTAssertEqual(parse("007", "i"), .int32(7))
        XCTAssertEqual(parse("3", "h"), .unixFD(3))
    }

    func testEveryIntegerTypeAcceptsExactlyItsRange() {
        let ranges: [(String, String, String, DBusValue, DBusValue)] = [
            ("y", "0", "255", .byte(0), .byte(255)),
            ("n", "-32768", "32767", .int16(.min), .int16(.max)),
            ("q", "0", "65535", .uint16(0), .uint16(.max)),
            ("i", "-2147483648", "2147483647", .int32(.min), .int32(.max)),
            ("u", "0", "4294967295", .uint32(0), .uint32(.max)),
            ("x", "-9223372036854775808", "9223372036854775807", .int64(.min), .int64(.max)),
            ("t", "0", "18446744073709551615", .uint64(0), .uint64(.max)),
            ("h", "-2147483648", "2147483647", .unixFD(.min), .unixFD(.max)),
        ]
        for (signature, low, high, lowValue, highValue) in ranges {
            XCTAssertEqual(parse(low, signature), lowValue, signature)
            XCTAssertEqual(parse(high, signature), highValue, signature)
            XCTAssertTrue(failure(decrement(low), signature).contains("out of range for type '\(signature)'"), signature)
            XCTAssertTrue(failure(increment(high), signature).contains("out of range for type '\(signature)'"), signature)
        }
    }

    private func increment(_ decimal: String) -> String {
        // Good enough for the limits above, none of which end in 9.
        String(decimal.dropLast()) + String(Int(String(decimal.last!))! + 1)
    }

    private func decrement(_ decimal: String) -> String {
        decimal == "0" ? "-1" : String(decimal.dropLast()) + String(Int(String(decimal.last!))! + 1)
    }

    func testOutOfRangeMessageNamesTheValueTypeAndRange() {
        XCTAssertEqual(failure("300", "y"), "value 300 out of range for type 'y' (0…255)")
        XCTAssertEqual(failure("-1", "u"), "value -1 out of range for type 'u' (0…4294967295)")
        XCTAssertEqual(failure("0x10000", "q"), "value 0x10000 out of range for type 'q' (0…65535)")
        XCTAssertEqual(
            failure("99999999999999999999", "t"),
            "value 99999999999999999999 out of range for type 't' (0…18446744073709551615)")
        XCTAssertEqual(
            failure("-99999999999999999999", "x"),
            "value -99999999999999999999 out of range for type 'x' (-9223372036854775808…9223372036854775807)")
    }

    func testIntegersRejectNonIntegerText() {
        for text in ["", "abc", "1.5", "1e3", "0x", "--1", "1 2", "12a", "0xZZ", "٣", "+", "-"] {
            XCTAssertTrue(failure(text, "i").hasPrefix("expected an integer for type 'i', got '"), text)
        }
    }

    // MARK: Doubles

    func testDoublesAcceptDecimalsExponentsAndSpecialValues() {
        XCTAssertEqual(parse("3.5", "d"), .double(3.5))
        XCTAssertEqual(parse("-2", "d"), .double(-2))
        XCTAssertEqual(parse("1e-5", "d"), .double(1e-5))
        XCTAssertEqual(parse(".5", "d"), .double(0.5))
        XCTAssertEqual(parse("0x1p4", "d"), .double(16))
        XCTAssertEqual(parse("inf", "d"), .double(.infinity))
        XCTAssertEqual(parse("-Infinity", "d"), .double(-.infinity))
        XCTAssertEqual(parse("+INF", "d"), .double(.infinity))
        guard case .double(let nan) = parse("NaN", "d") else { return XCTFail() }
        XCTAssertTrue(nan.isNaN)
    }

    func testDoublesRejectWordsAndOverflow() {
        XCTAssertEqual(failure("fast", "d"), "expected a number for type 'd', got 'fast'")
        XCTAssertTrue(failure("", "d").contains("expected a number"))
        XCTAssertTrue(failure("nan(0x1)", "d").contains("expected a number"))
        XCTAssertEqual(failure("1e400", "d"), "value 1e400 out of range for type 'd'")
    }

    func testDoublesPrintPlainAndSpecialValuesByName() {
        XCTAssertEqual(ValueText.format(.double(3.5)), "3.5")
        XCTAssertEqual(ValueText.format(.double(3)), "3.0")
        XCTAssertEqual(ValueText.format(.double(.infinity)), "inf")
        XCTAssertEqual(ValueText.format(.double(-.infinity)), "-inf")
        XCTAssertEqual(ValueText.format(.double(.nan)), "nan")
        XCTAssertEqual(ValueText.json(.double(.infinity)), "\"inf\"")
        XCTAssertEqual(ValueText.json(.double(0.1)), "0.1")
    }

    // MARK: Strings, paths, signatures

    func testStringsAreTakenVerbatim() {
        for text in ["hello", "", "  spaced  ", "\"quoted\"", "[1,2]", "{\"k\":1}", "ünïcødé 🎉", "line\nbreak", "true"] {
            XCTAssertEqual(parse(text, "s"), .string(text), text)
            XCTAssertEqual(ValueText.format(.string(text)), text)
        }
    }

    func testStringsMayNotHoldNul() {
        XCTAssertTrue(failure("a\u{0}b", "s").contains("NUL"))
        XCTAssertTrue(failure(#"["a\u0000b"]"#, "as").contains("NUL"))
    }

    func testObjectPathsAreValidated() {
        XCTAssertEqual(parse("/", "o"), .objectPath("/"))
        XCTAssertEqual(parse("/org/propbus/PropBus1", "o"), .objectPath("/org/propbus/PropBus1"))
        for text in ["", "org", "/org/", "//", "/a//b", "/a-b", "/ä"] {
            XCTAssertTrue(failure(text, "o").hasPrefix("expected an object path for type 'o'"), text)
        }
    }

    func testSignaturesAreValidated() {
        XCTAssertEqual(parse("a{sv}", "g"), .signature("a{sv}"))
        XCTAssertEqual(parse("", "g"), .signature(""))
        XCTAssertEqual(parse("sib", "g"), .signature("sib"))
        let message = failure("a{vs}", "g")
        XCTAssertTrue(message.hasPrefix("expected a signature for type 'g', got 'a{vs}'"), message)
        XCTAssertTrue(failure("(", "g").contains("expected a signature"))
        XCTAssertTrue(failure("z", "g").contains("unknown type code"))
    }

    // MARK: Arrays

    func testStringArraysAreJSON() {
        XCTAssertEqual(parse(#"["a","b"]"#, "as"), .array(element: .string, [.string("a"), .string("b")]))
        XCTAssertEqual(parse(" [ ] ", "as"), .array(element: .string, []))
        XCTAssertEqual(ValueText.format(.array(element: .string, [.string("a"), .string("b")])), #"["a","b"]"#)
    }

    func testArrayErrorsSayWhatWasExpectedAndWhere() {
        XCTAssertTrue(failure("a,b", "as").hasPrefix("expected a JSON array for type 'as': invalid JSON at byte 0"))
        XCTAssertEqual(failure(#"{"a":1}"#, "as"), #"expected a JSON array for type 'as', got {"a":1}"#)
        XCTAssertEqual(failure(#"["a", 1]"#, "as"), "expected a JSON string for type 's', got 1 (at [1])")
        XCTAssertEqual(failure("[1, 300]", "ay"), "value 300 out of range for type 'y' (0…255) (at [1])")
        XCTAssertEqual(failure("[[1],[2,true]]", "aai"), "expected an integer for type 'i', got true (at [1][1])")
        XCTAssertEqual(failure("[1.5]", "ai"), "expected an integer for type 'i', got 1.5 (at [0])")
        XCTAssertEqual(failure("[null]", "ad"), "expected a number for type 'd', got null (at [0])")
    }

    func testNumericArraysAcceptJSONNumbersAndScalarStrings() {
        XCTAssertEqual(parse("[1, -2, 3]", "ai"), .array(element: .int32, [.int32(1), .int32(-2), .int32(3)]))
        XCTAssertEqual(parse(#"[1e3, "0x10", 2.0]"#, "ai"), .array(element: .int32, [.int32(1000), .int32(16), .int32(2)]))
        XCTAssertEqual(
            parse(#"[1, 2.5, "inf", "-inf", 1e300]"#, "ad"),
            .array(element: .double, [.double(1), .double(2.5), .double(.infinity), .double(-.infinity), .double(1e300)]))
        XCTAssertEqual(parse(#"[true, 0, "off", 1]"#, "ab"), .array(element: .boolean, [.boolean(true), .boolean(false), .boolean(false), .boolean(true)]))
    }

    func testNestedArrays() {
        let expected = DBusValue.array(element: .array(.int32), [
            .array(element: .int32, [.int32(1), .int32(2)]),
            .array(element: .int32, [.int32(3)]),
        ])
        XCTAssertEqual(parse("[[1,2],[3]]", "aai"), expected)
        XCTAssertEqual(ValueText.format(expected), "[[1,2],[3]]")
        XCTAssertEqual(parse("[[[]]]", "aaas"), .array(element: .array(.array(.string)), [.array(element: .array(.string), [.array(element: .string, [])])]))
    }

    func testByteArraysAcceptNumbersOrAString() {
        XCTAssertEqual(parse("[0, 1, 255]", "ay"), .bytes([0, 1, 255]))
        XCTAssertEqual(parse(#""hi é""#, "ay"), .bytes(Array("hi é".utf8)))
        XCTAssertEqual(parse("[]", "ay"), .bytes([]))
        XCTAssertEqual(ValueText.format(.bytes([104, 105])), "[104,105]")
        XCTAssertEqual(
            failure("hello", "ay").prefix(63), "expected a JSON array of numbers or a JSON string for type 'ay'")
        XCTAssertEqual(failure("{}", "ay"), "expected a JSON array of numbers or a JSON string for type 'ay', got {}")
    }

    func testObjectPathAndSignatureArraysValidateEachElement() {
        XCTAssertEqual(parse(#"["/a","/b/c"]"#, "ao"), .array(element: .objectPath, [.objectPath("/a"), .objectPath("/b/c")]))
        XCTAssertTrue(failure(#"["/a","b"]"#, "ao").hasSuffix("(at [1])"))
        XCTAssertEqual(parse(#"["s","a{sv}"]"#, "ag"), .array(element: .signature, [.signature("s"), .signature("a{sv}")]))
        XCTAssertTrue(failure(#"["(" ]"#, "ag").contains("expected a signature"))
    }

    // MARK: Dicts

    func testVardictInfersEachValuesType() {
        let value = parse(#"{"k": 1, "b": true, "s": "x", "d": 2.5, "big": 18446744073709551615, "l": ["p","q"], "m": [1, "a"], "o": {"n": -1}}"#, "a{sv}")
        XCTAssertEqual(value, .dictionary(key: .string, value: .variant, [
            DictionaryEntry(.string("k"), .variant(.int64(1))),
            DictionaryEntry(.string("b"), .variant(.boolean(true))),
            DictionaryEntry(.string("s"), .variant(.string("x"))),
            DictionaryEntry(.string("d"), .variant(.double(2.5))),
            DictionaryEntry(.string("big"), .variant(.uint64(.max))),
            DictionaryEntry(.string("l"), .variant(.array(element: .string, [.string("p"), .string("q")]))),
            DictionaryEntry(.string("m"), .variant(.array(element: .variant, [.variant(.int64(1)), .variant(.string("a"))]))),
            DictionaryEntry(.string("o"), .variant(.dictionary(key: .string, value: .variant, [
                DictionaryEntry(.string("n"), .variant(.int64(-1))),
            ]))),
        ]))
    }

    func testVardictRefusesNull() {
        XCTAssertEqual(failure(#"{"k": null}"#, "a{sv}"), #"cannot infer a variant's type from JSON null (at ["k"])"#)
    }

    func testDictKeysAreConvertedToTheKeyType() {
        XCTAssertEqual(parse(#"{"k": 1}"#, "a{si}"), .dictionary(key: .string, value: .int32, [DictionaryEntry(.string("k"), .int32(1))]))
        XCTAssertEqual(parse(#"{"1": true, "-2": false}"#, "a{ib}"), .dictionary(key: .int32, value: .boolean, [
            DictionaryEntry(.int32(1), .boolean(true)),
            DictionaryEntry(.int32(-2), .boolean(false)),
        ]))
        XCTAssertEqual(parse(#"{"yes": "a"}"#, "a{bs}"), .dictionary(key: .boolean, value: .string, [DictionaryEntry(.boolean(true), .string("a"))]))
        XCTAssertEqual(parse(#"{"/p": 1.5}"#, "a{od}"), .dictionary(key: .objectPath, value: .double, [DictionaryEntry(.objectPath("/p"), .double(1.5))]))
        XCTAssertEqual(parse("{}", "a{sv}"), .dictionary(key: .string, value: .variant, []))
    }

    func testDictKeyErrorsNameTheKey() {
        XCTAssertEqual(failure(#"{"one": true}"#, "a{ib}"), #"dict key: expected an integer for type 'i', got 'one' (at ["one"])"#)
        XCTAssertEqual(failure(#"{"300": 1}"#, "a{yi}"), #"dict key: value 300 out of range for type 'y' (0…255) (at ["300"])"#)
        XCTAssertEqual(failure(#"{"k": "x"}"#, "a{si}"), #"expected an integer for type 'i', got 'x' (at ["k"])"#)
        XCTAssertEqual(failure("[1]", "a{si}"), "expected a JSON object for type 'a{si}', got [1]")
    }

    func testDictsWithNonStringKeysPrintKeysAsText() {
        let value = DBusValue.dictionary(key: .int32, value: .boolean, [DictionaryEntry(.int32(1), .boolean(true))])
        XCTAssertEqual(ValueText.format(value), #"{"1":true}"#)
        let doubles = DBusValue.dictionary(key: .double, value: .string, [DictionaryEntry(.double(.infinity), .string("x"))])
        XCTAssertEqual(ValueText.format(doubles), #"{"inf":"x"}"#)
    }

    func testDictsKeepEntryOrder() {
        let value = parse(#"{"z": 1, "a": 2, "m": 3}"#, "a{sx}")
        XCTAssertEqual(ValueText.format(value!), #"{"z":1,"a":2,"m":3}"#)
    }

    // MARK: Structs

    func testStructsAreJSONArraysWithOneElementPerField() {
        XCTAssertEqual(parse(#"["x", 1]"#, "(si)"), .structure([.string("x"), .int32(1)]))
        XCTAssertEqual(ValueText.format(.structure([.string("x"), .int32(1)])), #"["x",1]"#)
        XCTAssertEqual(
            parse(#"[[true, [1.5]], {"a": "b"}]"#, "((bad)a{ss})"),
            .structure([
                .structure([.boolean(true), .array(element: .double, [.double(1.5)])]),
                .dictionary(key: .string, value: .string, [DictionaryEntry(.string("a"), .string("b"))]),
            ]))
    }

    func testStructFieldCountMustMatch() {
        XCTAssertEqual(failure(#"["x"]"#, "(si)"), #"expected a JSON array of 2 fields for struct '(si)', got ["x"]"#)
        XCTAssertEqual(failure(#"["x", 1, 2]"#, "(si)"), #"expected a JSON array of 2 fields for struct '(si)', got ["x",1,2]"#)
        XCTAssertEqual(failure(#"{"a": 1}"#, "(i)"), #"expected a JSON array of 1 field for struct '(i)', got {"a":1}"#)
        XCTAssertEqual(failure(#"[1, "x"]"#, "(si)"), "expected a JSON string for type 's', got 1 (at [0])")
    }

    // MARK: Variants

    func testTopLevelVariantInfersFromJSON() {
        XCTAssertEqual(parse("42", "v"), .variant(.int64(42)))
        XCTAssertEqual(parse("-1", "v"), .variant(.int64(-1)))
        XCTAssertEqual(parse("18446744073709551615", "v"), .variant(.uint64(.max)))
        XCTAssertEqual(parse("3.5", "v"), .variant(.double(3.5)))
        XCTAssertEqual(parse("2.0", "v"), .variant(.double(2)))
        XCTAssertEqual(parse("true", "v"), .variant(.boolean(true)))
        XCTAssertEqual(parse(#""quoted""#, "v"), .variant(.string("quoted")))
        XCTAssertEqual(parse(#"["a"]"#, "v"), .variant(.array(element: .string, [.string("a")])))
        XCTAssertEqual(parse("[]", "v"), .variant(.array(element: .string, [])))
        XCTAssertEqual(parse("[1, [2]]", "v"), .variant(.array(element: .variant, [
            .variant(.int64(1)),
            .variant(.array(element: .variant, [.variant(.int64(2))])),
        ])))
        XCTAssertEqual(parse(#"{"a": false}"#, "v"), .variant(.vardict(["a": .boolean(false)])))
    }

    func testTopLevelVariantFallsBackToAPlainString() {
        XCTAssertEqual(parse("hello", "v"), .variant(.string("hello")))
        XCTAssertEqual(parse("hello world", "v"), .variant(.string("hello world")))
        XCTAssertEqual(parse("", "v"), .variant(.string("")))
        XCTAssertEqual(parse("[1,", "v"), .variant(.string("[1,")))
    }

    func testTopLevelVariantRefusesNull() {
        XCTAssertEqual(failure("null", "v"), "cannot infer a variant's type from JSON null")
    }

    func testVariantsPrintPlainWhenThatReadsBack() {
        XCTAssertEqual(ValueText.format(.variant(.string("hello"))), "hello")
        XCTAssertEqual(ValueText.format(.variant(.int64(42))), "42")
        XCTAssertEqual(ValueText.format(.variant(.boolean(true))), "true")
        XCTAssertEqual(ValueText.format(.variant(.string("true"))), #""true""#)
        XCTAssertEqual(ValueText.format(.variant(.string("42"))), #""42""#)
        XCTAssertEqual(ValueText.format(.variant(.string("null"))), #""null""#)
        XCTAssertEqual(ValueText.format(.variant(.array(element: .int32, [.int32(1)]))), "[1]")
        XCTAssertEqual(ValueText.json(.variant(.string("hello"))), #""hello""#)
    }

    func testDeeplyNestedVariantsAreRefusedNotCrashed() {
        let deep = String(repeating: "[", count: 70) + "1" + String(repeating: "]", count: 70)
        let message = failure(deep, "v")
        XCTAssertTrue(message.contains("breaks the D-Bus rules"), message)
    }

    // MARK: JSON output

    func testJSONQuotesStringsAndKeepsScalarsTyped() {
        XCTAssertEqual(ValueText.json(.string("hello")), #""hello""#)
        XCTAssertEqual(ValueText.json(.objectPath("/a")), #""/a""#)
        XCTAssertEqual(ValueText.json(.boolean(false)), "false")
        XCTAssertEqual(ValueText.json(.uint64(.max)), "18446744073709551615")
        XCTAssertEqual(ValueText.json(.int64(.min)), "-9223372036854775808")
        XCTAssertEqual(ValueText.json(.byte(7)), "7")
        XCTAssertEqual(
            ValueText.json(.vardict(["b": .boolean(true), "a": .string("x")])),
            #"{"a":"x","b":true}"#)
    }

    func testJSONEscapesQuotesBackslashesAndControlCharacters() {
        XCTAssertEqual(ValueText.json(.string("a\"b\\c")), #""a\"b\\c""#)
        XCTAssertEqual(ValueText.json(.string("\n\r\t\u{08}\u{0C}")), #""\n\r\t\b\f""#)
        XCTAssertEqual(ValueText.json(.string("\u{01}\u{1F}\u{7F}")), #""\u0001\u001f\u007f""#)
        XCTAssertEqual(ValueText.json(.string("é🎉/")), "\"é🎉/\"")
    }

    func testJSONStringEscapesAreDecoded() {
        XCTAssertEqual(
            parse(#"["\"", "\\", "\/", "\b\f\n\r\t", "\u00e9", "\uD83C\uDF89", "\u20AC"]"#, "as"),
            .array(element: .string, ["\"", "\\", "/", "\u{08}\u{0C}\n\r\t", "é", "🎉", "€"].map { DBusValue.string($0) }))
    }

    func testJSONRejectsBadEscapesAndRawControlCharacters() {
        XCTAssertTrue(failure(#"["\uD83C"]"#, "as").contains("unpaired surrogate"))
        XCTAssertTrue(failure(#"["\uDF89x"]"#, "as").contains("unpaired surrogate"))
        XCTAssertTrue(failure(#"["\uD83C\u0041"]"#, "as").contains("unpaired surrogate"))
        XCTAssertTrue(failure(#"["\x"]"#, "as").contains("invalid escape '\\x'"))
        XCTAssertTrue(failure(#"["\u12G4"]"#, "as").contains("hex digits"))
        XCTAssertTrue(failure("[\"a\nb\"]", "as").contains("control character U+000A must be escaped"))
    }

    // MARK: Round trips

    func testEveryTypeRoundTripsThroughFormatAndJSON() {
        let values: [DBusValue] = [
            .byte(0), .byte(255),
            .boolean(true), .boolean(false),
            .int16(.min), .int16(.max), .uint16(.max),
            .int32(.min), .int32(.max), .uint32(.max),
            .int64(.min), .int64(.max), .uint64(.max), .uint64(0),
            .double(0), .double(-0.0), .double(3.5), .double(-1e-300), .double(.greatestFiniteMagnitude),
            .double(.leastNonzeroMagnitude), .double(0.1 + 0.2), .double(1e16), .double(.infinity), .double(-.infinity),
            .string(""), .string("hello"), .string(" spaced "), .string("quote\"back\\slash\nline\u{01}"), .string("🎉 ü"),
            .objectPath("/"), .objectPath("/org/propbus"),
            .signature(""), .signature("a{sv}(ii)"),
            .unixFD(0), .unixFD(3),
            .bytes([]), .bytes([0, 127, 255]),
            .array(element: .string, []), .array(element: .string, [.string("a"), .string("\"b\"")]),
            .array(element: .int64, [.int64(.min), .int64(.max)]),
            .array(element: .uint64, [.uint64(.max)]),
            .array(element: .double, [.double(.infinity), .double(2.5), .double(3)]),
            .array(element: .array(.int32), [.array(element: .int32, [.int32(1)]), .array(element: .int32, [])]),
            .array(element: .array(.byte), [.bytes([1, 2]), .bytes([])]),
            .array(element: .objectPath, [.objectPath("/a")]),
            .dictionary(key: .string, value: .variant, []),
            .vardict(["i": .int64(1), "s": .string("x"), "b": .boolean(true), "d": .double(1.5), "as": .array(element: .string, [.string("q")])]),
            .dictionary(key: .int32, value: .boolean, [DictionaryEntry(.int32(-1), .boolean(true)), DictionaryEntry(.int32(2), .boolean(false))]),
            .dictionary(key: .uint64, value: .string, [DictionaryEntry(.uint64(.max), .string("max"))]),
            .dictionary(key: .double, value: .int16, [DictionaryEntry(.double(-.infinity), .int16(1)), DictionaryEntry(.double(0.5), .int16(2))]),
            .dictionary(key: .boolean, value: .array(.byte), [DictionaryEntry(.boolean(false), .bytes([9]))]),
            .dictionary(key: .string, value: .dictionary(key: .string, value: .int32), [
                DictionaryEntry(.string("outer"), .dictionary(key: .string, value: .int32, [DictionaryEntry(.string("inner"), .int32(5))])),
            ]),
            .structure([.string("x"), .int32(1)]),
            .structure([.structure([.boolean(true)]), .array(element: .string, []), .double(-2)]),
            .array(element: .structure([.string, .variant]), [.structure([.string("k"), .variant(.string("v"))])]),
            .variant(.string("hello")), .variant(.string("true")), .variant(.string("")), .variant(.string("[")),
            .variant(.int64(-5)), .variant(.uint64(.max)), .variant(.double(2)), .variant(.boolean(false)),
            .variant(.array(element: .string, [])), .variant(.array(element: .variant, [.variant(.int64(1))])),
            .variant(.vardict(["k": .string("v")])),
        ]
        for value in values {
            assertRoundTrip(value)
        }
    }

    // MARK: Robustness

    func testMalformedJSONNeverCrashesAndAlwaysExplains() {
        let seeds = [
            #"{"k": 1, "b": true, "s": "x", "l": [1, 2.5e3, -0.5], "o": {"n": null}}"#,
            #"[["a\"b", "\u00e9\uD83C\uDF89"], [], [true, false]]"#,
            #"[1, -2, 3.0e-2, 18446744073709551615, -9223372036854775808]"#,
        ]
        let alphabet = Array(#"{}[]":,.-+eE0123456789tfnul\ "#.utf8) + [0x00, 0x0A, 0xC3, 0xA9]
        let types = ["v", "a{sv}", "as", "ai", "ay", "(sib)", "aad", "a{is}"].map { try! DBusType(parsing: $0) }
        var random = SplitMix64(seed: 0x5EED)
        for iteration in 0 ..< 3000 {
            var bytes = Array(seeds[iteration % seeds.count].utf8)
            for _ in 0 ... Int(random.next() % 4) {
                let position = Int(random.next() % UInt64(bytes.count + 1))
                switch random.next() % 3 {
                case 0 where position < bytes.count: bytes.remove(at: position)
                case 1 where position < bytes.count: bytes[position] = alphabet[Int(random.next() % UInt64(alphabet.count))]
                default: bytes.insert(alphabet[Int(random.next() % UInt64(alphabet.count))], at: position)
                }
            }
            let text = String(decoding: bytes, as: UTF8.self)
            if let json = try? JSONValue.parse(text) {
                // Whatever parses must print as JSON that parses back to the same value.
                XCTAssertEqual(try? JSONValue.parse(json.serialized()), json, text)
                XCTAssertEqual(try? JSONValue.parse(json.serialized(pretty: true)), json, text)
            }
            for type in types {
                do {
                    let value = try ValueText.parse(text, as: type)
                    XCTAssertNoThrow(try value.validate(), text)
                    _ = ValueText.format(value)
                } catch {
                    XCTAssertFalse(error.message.isEmpty, text)
                }
            }
        }
    }
}

/// A tiny deterministic generator so the fuzz loop is reproducible.
private struct SplitMix64 {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
