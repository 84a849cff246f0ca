import DBusValues
import XCTest

/// The byte encoding of a value that the store and the fleet's etcd keys share.
final class ValueCodecTests: XCTestCase {
    func testCodecRoundTripsEveryTypeExactly() throws {
        let values: [DBusValue] = [
            .byte(255), .boolean(true), .boolean(false), .int16(-32768), .uint16(65535),
            .int32(Int32.min), .uint32(UInt32.max), .int64(Int64.min), .int64(Int64.max), .uint64(UInt64.max),
            .double(0.1), .double(-0.0), .double(.infinity), .double(-.infinity), .double(.leastNonzeroMagnitude),
            .double(.greatestFiniteMagnitude), .double(1.0 / 3.0), .double(9007199254740992),
            .string(""), .string("héllo\u{0}wörld ✓"), .objectPath("/a/b"), .signature("a{sv}"),
            .variant(.variant(.int32(7))), .bytes([]), .bytes([0, 1, 255]),
            .array(of: .string, []), .array(of: .int64, [.int64(1), .int64(-1)]),
            .dictionary(key: .string, value: .variant, [DictionaryEntry(.string("k"), .variant(.array(of: .double, [.double(2.5)])))]),
            .structure([.int32(1), .string("two"), .structure([.boolean(true)])]),
        ]
        for value in values {
            XCTAssertEqual(try ValueCodec.decode(ValueCodec.encode(value)), value, "\(value)")
        }
        let nan = Double(nan: 0x1234, signaling: false)
        guard case .double(let back) = try ValueCodec.decode(ValueCodec.encode(.double(nan))) else { return XCTFail() }
        XCTAssertEqual(back.bitPattern, nan.bitPattern, "NaN payloads survive")
        XCTAssertEqual(ValueCodec.encode(.int32(1)), [1, 1, UInt8(ascii: "i"), 1, 0, 0, 0], "format byte, signature, little-endian payload")
    }

    func testCodecRejectsTruncatedAndTrailingBytes() {
        let bytes = ValueCodec.encode(.string("hello"))
        XCTAssertThrowsError(try ValueCodec.decode(Array(bytes.dropLast())))
        XCTAssertThrowsError(try ValueCodec.decode(bytes + [0]))
        XCTAssertThrowsError(try ValueCodec.decode([1, 1, UInt8(ascii: "a")]), "an incomplete signature")
        XCTAssertThrowsError(try ValueCodec.decode([1, 1, UInt8(ascii: "a"), 1, UInt8(ascii: "s"), 0xff, 0xff, 0xff, 0xff]), "a count beyond the data")
    }
}
