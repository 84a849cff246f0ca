import DBusValues
import XCTest

final class VarintTests: XCTestCase {
    func testNumbersReadBackFromTheirShortestForm() {
        let cases: [(UInt64, [UInt8])] = [
            (0, [0x00]), (1, [0x01]), (127, [0x7F]), (128, [0x80, 0x01]), (300, [0xAC, 0x02]),
            (UInt64.max, [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]),
        ]
        for (value, encoded) in cases {
            var bytes: [UInt8] = [0xEE]
            Varint.append(value, to: &bytes)
            XCTAssertEqual(bytes, [0xEE] + encoded, "\(value)")
            var offset = 1
            XCTAssertEqual(Varint.read(bytes, at: &offset), value)
            XCTAssertEqual(offset, bytes.count, "\(value): the offset moves past the number")
        }
    }

    func testASliceIsReadAtItsOwnIndices() {
        var bytes: [UInt8] = [9, 9]
        Varint.append(1_000_000, to: &bytes)
        Varint.append(5, to: &bytes)
        let slice = bytes[2...]
        var offset = slice.startIndex
        XCTAssertEqual(Varint.read(slice, at: &offset), 1_000_000)
        XCTAssertEqual(Varint.read(slice, at: &offset), 5)
        XCTAssertEqual(offset, slice.endIndex)
    }

    func testACutNumberAndOneOver64BitsAreNotRead() {
        var offset = 0
        XCTAssertNil(Varint.read([0x80, 0x80] as [UInt8], at: &offset), "ends before its last byte")
        offset = 0
        XCTAssertNil(Varint.read([UInt8](), at: &offset))
        offset = 0
        let over = [UInt8](repeating: 0xFF, count: 9) + [0x02]
        XCTAssertNil(Varint.read(over, at: &offset), "a 65th bit")
        offset = 0
        XCTAssertNil(Varint.read([UInt8](repeating: 0x80, count: 10) + [0x00], at: &offset), "eleven bytes")
    }
}
