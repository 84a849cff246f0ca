import CDBus
import XCTest

@testable import DBus

final class SignatureTests: XCTestCase {
    // MARK: Helpers

    private func assertInvalid(_ text: String, containing reason: String, file: StaticString = #filePath, line: UInt = #line) {
        do {
            let signature = try Signature(validating: text)
            XCTFail("'\(text)' parsed as \(signature.types) instead of failing", file: file, line: line)
        } catch {
            XCTAssertEqual(error.signature, text, file: file, line: line)
            XCTAssertTrue(error.reason.contains(reason), "'\(text)': \(error.reason)", file: file, line: line)
        }
    }

    private func libdbusAccepts(_ text: String) -> Bool {
        dbus_signature_validate(text, nil) != 0
    }

    private func nestedArrays(_ depth: Int, around inner: String) -> String {
        String(repeating: "a", count: depth) + inner
    }

    private func nestedStructs(_ depth: Int, around inner: String) -> String {
        String(repeating: "(", count: depth) + inner + String(repeating: ")", count: depth)
    }

    // MARK: Basic and container types

    func testEveryBasicTypeCodeParses() throws {
        let expected: [(String, DBusType)] = [
            ("y", .byte), ("b", .boolean), ("n", .int16), ("q", .uint16), ("i", .int32), ("u", .uint32),
            ("x", .int64), ("t", .uint64), ("d", .double), ("s", .string), ("o", .objectPath),
            ("g", .signature), ("h", .unixFD), ("v", .variant),
        ]
        for (text, type) in expected {
            XCTAssertEqual(try DBusType(parsing: text), type, text)
            XCTAssertEqual(type.signature, text)
            XCTAssertEqual(type.isBasic, text != "v", text)
        }
    }

    func testContainerTypesParseAndPrintBack() throws {
        let expected: [(String, DBusType)] = [
            ("as", .array(.string)),
            ("ay", .array(.byte)),
            ("aai", .array(.array(.int32))),
            ("a{sv}", .dictionary(key: .string, value: .variant)),
            ("a{ia{sv}}", .dictionary(key: .int32, value: .dictionary(key: .string, value: .variant))),
            ("a{hd}", .dictionary(key: .unixFD, value: .double)),
            ("(si)", .structure([.string, .int32])),
            ("(i)", .structure([.int32])),
            ("a(sv)", .array(.structure([.string, .variant]))),
            ("((i)(s)a{o(g)})", .structure([.structure([.int32]), .structure([.string]), .dictionary(key: .objectPath, value: .structure([.signature]))])),
            ("aa{sas}", .array(.dictionary(key: .string, value: .array(.string)))),
        ]
        for (text, type) in expected {
            XCTAssertEqual(try DBusType(parsing: text), type, text)
            XCTAssertEqual(type.signature, text)
            XCTAssertFalse(type.isBasic, text)
            XCTAssertEqual("\(type)", text)
        }
    }

    func testASignatureHoldsZeroOrMoreCompleteTypes() throws {
        XCTAssertEqual(try Signature(validating: "").types, [])
        XCTAssertEqual(try Signature(validating: "sia{sv}(ii)").types, [
            .string, .int32, .dictionary(key: .string, value: .variant), .structure([.int32, .int32]),
        ])
        XCTAssertEqual(try Signature(validating: "sia{sv}(ii)").description, "sia{sv}(ii)")
        XCTAssertEqual(Signature([.string, .array(.byte)]).description, "say")
    }

    func testSingleTypeParsingRefusesZeroOrSeveralTypes() {
        XCTAssertThrowsError(try DBusType(parsing: "")) { error in
            XCTAssertTrue("\(error)".contains("expected exactly one complete type, found 0"), "\(error)")
        }
        XCTAssertThrowsError(try DBusType(parsing: "si")) { error in
            XCTAssertTrue("\(error)".contains("expected exactly one complete type, found 2"), "\(error)")
        }
    }

    func testNumericAndBasicClassification() {
        XCTAssertTrue(DBusType.double.isNumeric)
        XCTAssertTrue(DBusType.byte.isNumeric)
        XCTAssertFalse(DBusType.boolean.isNumeric)
        XCTAssertFalse(DBusType.string.isNumeric)
        XCTAssertFalse(DBusType.unixFD.isNumeric)
        XCTAssertTrue(DBusType.unixFD.isBasic)
        XCTAssertFalse(DBusType.array(.byte).isBasic)
    }

    // MARK: Limits

    func testThirtyTwoNestedArraysAreAllowedButNotThirtyThree() throws {
        XCTAssertEqual(try DBusType(parsing: nestedArrays(32, around: "i")).signature, nestedArrays(32, around: "i"))
        assertInvalid(nestedArrays(33, around: "i"), containing: "arrays nested deeper than 32")
        // The dict's own 'a' counts as one of the arrays.
        XCTAssertNoThrow(try DBusType(parsing: nestedArrays(32, around: "{si}")))
        assertInvalid(nestedArrays(33, around: "{si}"), containing: "arrays nested deeper than 32")
        assertInvalid(nestedArrays(32, around: "{sai}"), containing: "arrays nested deeper than 32")
    }

    func testThirtyTwoNestedStructsAreAllowedButNotThirtyThree() throws {
        XCTAssertNoThrow(try DBusType(parsing: nestedStructs(32, around: "i")))
        assertInvalid(nestedStructs(33, around: "i"), containing: "structs nested deeper than 32")
    }

    func testArrayAndStructDepthsAreCountedSeparately() throws {
        let mixed = String(repeating: "a(", count: 32) + "i" + String(repeating: ")", count: 32)
        XCTAssertNoThrow(try DBusType(parsing: mixed))
        assertInvalid("a" + mixed, containing: "arrays nested deeper than 32")
        assertInvalid("(" + mixed + ")", containing: "structs nested deeper than 32")
    }

    func testSignaturesAreLimitedTo255Bytes() throws {
        XCTAssertEqual(try Signature(validating: String(repeating: "i", count: 255)).types.count, 255)
        assertInvalid(String(repeating: "i", count: 256), containing: "longer than 255 bytes")
        let longStruct = "(" + String(repeating: "i", count: 254) + ")"
        assertInvalid(longStruct, containing: "longer than 255 bytes")
    }

    // MARK: Dict entries

    func testDictKeysMustBeBasic() {
        for key in ["v", "as", "(i)", "a{ss}", "ay"] {
            assertInvalid("a{\(key)s}", containing: "dict key must be a basic type")
        }
        for key in ["y", "b", "n", "q", "i", "u", "x", "t", "d", "s", "o", "g", "h"] {
            XCTAssertNoThrow(try DBusType(parsing: "a{\(key)v}"), key)
        }
    }

    func testDictEntriesOnlyAppearInsideArraysWithExactlyTwoFields() {
        assertInvalid("{sv}", containing: "dict entry outside an array")
        assertInvalid("({sv})", containing: "dict entry outside an array")
        assertInvalid("a({sv})", containing: "dict entry outside an array")
        assertInvalid("a{s}", containing: "unexpected '}'")
        assertInvalid("a{}", containing: "unexpected '}'")
        assertInvalid("a{svs}", containing: "expected '}' to close a dict entry")
    }

    // MARK: Malformed text

    func testEmptyStructsAreRefused() {
        assertInvalid("()", containing: "empty struct")
        assertInvalid("a()", containing: "empty struct")
        assertInvalid("(i())", containing: "empty struct")
    }

    func testUnknownTypeCodesAreRefused() {
        for code in ["z", "r", "e", "m", "*", "?", "@", "&", "^", "A", " ", "1", "é"] {
            assertInvalid(code, containing: "unknown type code")
        }
        assertInvalid("si z", containing: "unknown type code ' '")
    }

    func testTruncatedSignaturesAreRefused() {
        assertInvalid("a", containing: "expected a type, found the end")
        assertInvalid("aa", containing: "expected a type, found the end")
        assertInvalid("(i", containing: "expected ')' to close a struct")
        assertInvalid("((i)", containing: "expected ')' to close a struct")
        assertInvalid("a{", containing: "expected a type, found the end")
        assertInvalid("a{s", containing: "expected a type, found the end")
        assertInvalid("a{sv", containing: "expected '}' to close a dict entry")
    }

    func testStrayClosersAreRefused() {
        assertInvalid(")", containing: "unexpected ')'")
        assertInvalid("i)", containing: "unexpected ')'")
        assertInvalid("}", containing: "unexpected '}'")
        assertInvalid("a}", containing: "unexpected '}'")
    }

    func testErrorsNameTheSignatureAndPosition() {
        XCTAssertThrowsError(try Signature(validating: "a{vs}")) { error in
            XCTAssertEqual("\(error)", "invalid signature 'a{vs}': dict key must be a basic type, not 'v' at position 3")
        }
    }

    func testAgreesWithLibdbusOnValidity() {
        var signatures = [
            "", "y", "a{sv}", "a{vs}", "()", "(i)", "a", "{sv}", "a{sv}}", "aa{s(ii)}", "a{s}", "a{sss}",
            nestedArrays(32, around: "y"), nestedArrays(33, around: "y"), nestedStructs(32, around: "y"),
            nestedStructs(33, around: "y"), String(repeating: "a(", count: 32) + "i" + String(repeating: ")", count: 32),
            String(repeating: "s", count: 255), String(repeating: "s", count: 256),
        ]
        // Deterministic random strings over the signature alphabet, biased towards short ones.
        let alphabet = Array("ybnqiuxtdsoghva(){}z")
        var state: UInt64 = 0x1234_5678
        for _ in 0 ..< 2000 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            let length = Int(state >> 59) % 9
            var text = ""
            for _ in 0 ..< length {
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                text.append(alphabet[Int(state >> 33) % alphabet.count])
            }
            signatures.append(text)
        }
        for text in signatures {
            let ours = (try? Signature(validating: text)) != nil
            XCTAssertEqual(ours, libdbusAccepts(text), "'\(text)': ours \(ours), libdbus \(libdbusAccepts(text))")
        }
    }
}

final class DBusValueValidationTests: XCTestCase {
    private func nestedArray(_ depth: Int) -> DBusValue {
        var value = DBusValue.int32(1)
        for _ in 0 ..< depth {
            value = .array(element: value.type, [value])
        }
        return value
    }

    private func nestedStruct(_ depth: Int) -> DBusValue {
        var value = DBusValue.int32(1)
        for _ in 0 ..< depth {
            value = .structure([value])
        }
        return value
    }

    private func assertInvalid(_ value: DBusValue, containing reason: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try value.validate(), file: file, line: line) { error in
            XCTAssertTrue("\(error)".contains(reason), "\(error)", file: file, line: line)
        }
    }

    func testWellFormedValuesPass() {
        let values: [DBusValue] = [
            .byte(1), .boolean(true), .int16(-1), .uint16(1), .int32(-1), .uint32(1), .int64(-1), .uint64(1),
            .double(.nan), .string("héllo"), .objectPath("/a/b"), .signature("a{sv}"), .unixFD(0),
            .variant(.string("x")), .bytes([0, 1]), .array(of: .string, [.string("a")]),
            .vardict(["k": .int32(1)]), .structure([.string("s"), .variant(.boolean(false))]),
            nestedArray(32), nestedStruct(32),
        ]
        for value in values {
            XCTAssertNoThrow(try value.validate(), "\(value)")
        }
    }

    func testStringsPathsAndSignaturesAreChecked() {
        assertInvalid(.string("a\u{0}b"), containing: "NUL")
        assertInvalid(.objectPath("/a/"), containing: "not a valid object path")
        assertInvalid(.signature("a{vs}"), containing: "dict key must be a basic type")
        assertInvalid(.array(element: .objectPath, [.objectPath("nope")]), containing: "not a valid object path")
    }

    func testContainersMustHoldTheirDeclaredTypes() {
        assertInvalid(.array(element: .string, [.string("a"), .int32(1)]), containing: "array of 's' holds a 'i'")
        assertInvalid(
            .dictionary(key: .string, value: .int32, [DictionaryEntry(.string("k"), .string("v"))]),
            containing: "holds an entry {ss}")
        assertInvalid(.dictionary(key: .variant, value: .int32, []), containing: "is not basic")
        assertInvalid(.structure([]), containing: "empty struct")
    }

    func testNestingLimits() {
        assertInvalid(nestedArray(33), containing: "arrays nested deeper than 32")
        assertInvalid(nestedStruct(33), containing: "structs nested deeper than 32")
        var variants = DBusValue.int32(1)
        for _ in 0 ..< 64 { variants = .variant(variants) }
        XCTAssertNoThrow(try variants.validate())
        assertInvalid(.variant(variants), containing: "variants nested too deeply")
    }

    func testArrayBuilderNormalizesByteArrays() {
        XCTAssertEqual(DBusValue.array(of: .byte, [.byte(1), .byte(2)]), .bytes([1, 2]))
        XCTAssertEqual(DBusValue.array(of: .byte, []).type, .array(.byte))
        XCTAssertEqual(DBusValue.array(of: .int32, []), .array(element: .int32, []))
    }

    func testTypesAndSignaturesOfValues() {
        XCTAssertEqual(DBusValue.bytes([]).signature, "ay")
        XCTAssertEqual(DBusValue.vardict([:]).signature, "a{sv}")
        XCTAssertEqual(DBusValue.structure([.string("x"), .bytes([])]).signature, "(say)")
        XCTAssertEqual(DBusValue.variant(.int32(1)).signature, "v")
        XCTAssertEqual(DBusValue.variant(.variant(.int32(1))).unwrappingVariant, .int32(1))
    }

    func testWireSizesIncludeAlignmentAndTerminators() {
        XCTAssertEqual(DBusValue.string("ab").wireSize(), 7)
        XCTAssertEqual(DBusValue.string("ab").wireSize(at: 1), 10)
        XCTAssertEqual(DBusValue.objectPath("/").wireSize(), 6)
        XCTAssertEqual(DBusValue.signature("ii").wireSize(at: 3), 4)
        XCTAssertEqual(DBusValue.byte(1).wireSize(at: 3), 1)
        XCTAssertEqual(DBusValue.boolean(true).wireSize(), 4)
        XCTAssertEqual(DBusValue.int16(1).wireSize(at: 1), 3)
        XCTAssertEqual(DBusValue.int32(1).wireSize(at: 1), 7)
        XCTAssertEqual(DBusValue.int64(1).wireSize(at: 1), 15)
        XCTAssertEqual(DBusValue.double(1).wireSize(), 8)
        XCTAssertEqual(DBusValue.unixFD(0).wireSize(), 4)
        XCTAssertEqual(DBusValue.bytes([1, 2, 3]).wireSize(), 7)
        // Length, then padding to the element alignment even when empty.
        XCTAssertEqual(DBusValue.array(element: .int64, []).wireSize(), 8)
        XCTAssertEqual(DBusValue.array(element: .int32, [.int32(1), .int32(2)]).wireSize(), 12)
        // Signature "i" takes 3 bytes, then the int32 is aligned to 4.
        XCTAssertEqual(DBusValue.variant(.int32(1)).wireSize(), 8)
        XCTAssertEqual(DBusValue.structure([.byte(1), .int32(2)]).wireSize(at: 4), 12)
        // a{sv} {"a": <int32 1>}: length 4, pad to 8, "a" 6, sig "i" 3, pad 3, int32 4.
        XCTAssertEqual(DBusValue.vardict(["a": .int32(1)]).wireSize(), 24)
    }
}
