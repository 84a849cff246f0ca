import DBus
@testable import propctl
import XCTest

/// propctl reads `ListPropertiesCompact` and puts each row back together as `ListProperties`
/// says it: the shape's type and metadata, with the row's own fields.
final class CompactListingTests: XCTestCase {
    func testCompactRowsAreTheFullListingsRows() {
        let shapes: [DBusValue] = [
            .structure([.string("i"), .vardict(["default": .int32(1), "persistent": .boolean(true), "writable": .boolean(true),
                                                 "description": .string(""), "secret": .boolean(false)])]),
            .structure([.string("s"), .vardict(["default": .string("x"), "persistent": .boolean(false), "writable": .boolean(false),
                                                 "description": .string("a word"), "secret": .boolean(false), "source": .string("/m.json")])]),
        ]
        let row = { (key: String, shape: UInt32, value: DBusValue, revision: UInt64, isSet: Bool, extra: [String: DBusValue]) -> DBusValue in
            .structure([.string(key), .uint32(shape), .variant(value), .uint64(revision), .boolean(isSet), .vardict(extra)])
        }
        let reply: [DBusValue] = [
            .array(of: .structure([.string, .uint32, .variant, .uint64, .boolean, .dictionary(key: .string, value: .variant)]), [
                row("a.one", 0, .int32(4), 7, true, [:]),
                row("a.two", 1, .string("x"), 2, false, ["hidden_reason": .string("80 is above the maximum 9"), "hidden_value": .int32(80)]),
                row("a.three", 0, .int32(1), 3, false, ["etcd_revision": .int64(42)]),
            ]),
            .array(of: .structure([.string, .dictionary(key: .string, value: .variant)]), shapes),
        ]
        let rows = ListedProperty.rows(ofCompactListing: reply)
        XCTAssertEqual(rows.map(\.key), ["a.one", "a.two", "a.three"])
        XCTAssertEqual(rows.map(\.type), ["i", "s", "i"])
        XCTAssertEqual(rows.map(\.value), [.int32(4), .string("x"), .int32(1)])
        XCTAssertEqual(rows[0].metadata, ["default": .int32(1), "persistent": .boolean(true), "writable": .boolean(true),
                                          "description": .string(""), "secret": .boolean(false), "revision": .uint64(7), "is_set": .boolean(true)])
        XCTAssertEqual(rows[1].metadata, ["default": .string("x"), "persistent": .boolean(false), "writable": .boolean(false),
                                          "description": .string("a word"), "secret": .boolean(false), "source": .string("/m.json"),
                                          "revision": .uint64(2), "is_set": .boolean(false),
                                          "hidden_reason": .string("80 is above the maximum 9"), "hidden_value": .int32(80)])
        XCTAssertEqual(rows[2].metadata["etcd_revision"], .int64(42))
        XCTAssertEqual(rows[2].metadata["default"], .int32(1))
    }
}
