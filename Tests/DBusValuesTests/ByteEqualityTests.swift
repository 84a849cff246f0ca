import DBusValues
import XCTest

/// Values compare as the bytes they are on the wire: not by Unicode canonical
/// equivalence, not by IEEE comparison.
final class ByteEqualityTests: XCTestCase {
    let precomposed = "\u{E9}", decomposed = "e\u{301}"

    func testCanonicallyEquivalentStringsAreDifferentValues() {
        XCTAssertNotEqual(DBusValue.string(precomposed), .string(decomposed))
        XCTAssertNotEqual(DBusValue.string("\u{212A}"), .string("K"), "the Kelvin sign is not K")
        XCTAssertNotEqual(DBusValue.string("\u{C5}"), .string("A\u{30A}"))
        XCTAssertNotEqual(DBusValue.string("\u{AC00}"), .string("\u{1100}\u{1161}"), "Hangul syllable vs jamo")
        XCTAssertNotEqual(DBusValue.array(of: .string, [.string(precomposed)]), .array(of: .string, [.string(decomposed)]))
        XCTAssertNotEqual(DBusValue.variant(.string(precomposed)), .variant(.string(decomposed)))
        XCTAssertNotEqual(DBusValue.objectPath("/a"), .string("/a"))
        XCTAssertEqual(DBusValue.string(precomposed), .string("\u{E9}"))
    }

    func testDoublesCompareByBitPattern() {
        XCTAssertEqual(DBusValue.double(.nan), .double(.nan), "the same NaN is no change")
        XCTAssertNotEqual(DBusValue.double(-0.0), .double(0.0), "−0.0 is other bytes than 0.0")
        XCTAssertEqual(DBusValue.array(of: .double, [.double(.nan)]), .array(of: .double, [.double(.nan)]))
        XCTAssertEqual(DBusValue.variant(.double(.nan)), .variant(.double(.nan)))
    }

    func testHashingAgreesWithEquality() {
        let values: [DBusValue] = [.string(precomposed), .string(decomposed), .double(0.0), .double(-0.0), .double(.nan),
                                   .variant(.string(decomposed)), .structure([.string(precomposed), .int32(1)])]
        XCTAssertEqual(Set(values).count, values.count)
        XCTAssertTrue(Set(values).contains(.double(.nan)))
        XCTAssertTrue(Set([DBusValue.string(precomposed)]).contains(.string("\u{E9}")))
        XCTAssertFalse(Set([DBusValue.string(precomposed)]).contains(.string(decomposed)))
    }
}
