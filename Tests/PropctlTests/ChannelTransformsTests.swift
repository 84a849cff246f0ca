import CommandLineKit
import DBus
import PropBus
import XCTest
@testable import propctl

/// The text conventions of `propctl bind`: bus values ↔ local text, with and without
/// `--map`/`--unmap`.
final class ChannelTransformsTests: XCTestCase {
    private let key = try! Key("ui.switch.on")

    func testWithoutTransformsTextIsReadByTheKeyTypeAndPrintedLikeGet() throws {
        let plain = try ChannelTransforms(map: nil, unmap: nil)
        XCTAssertEqual(try plain.localText(for: .boolean(true), key: key), "true")
        XCTAssertEqual(try plain.busValue(for: "false", key: key, type: .boolean, current: nil), .boolean(false))
        XCTAssertEqual(try plain.busValue(for: "42", key: key, type: .int32, current: nil), .int32(42))
        XCTAssertEqual(try plain.localText(for: .array(of: .string, [.string("a")]), key: key), #"["a"]"#)
        XCTAssertThrowsError(try plain.busValue(for: "maybe", key: key, type: .boolean, current: nil))
    }

    func testOnOffMapsToOneZeroBothWays() throws {
        let onOff = try ChannelTransforms(map: #"value == "1" ? "On" : "Off""#, unmap: #"value == "On" ? "1" : "0""#)
        XCTAssertEqual(try onOff.localText(for: .string("1"), key: key), "On")
        XCTAssertEqual(try onOff.localText(for: .string("0"), key: key), "Off")
        XCTAssertEqual(try onOff.busValue(for: "On", key: key, type: .string, current: nil), .string("1"))
        XCTAssertEqual(try onOff.busValue(for: "Off", key: key, type: .string, current: nil), .string("0"))
        // A string result is read by the key's type, so "1" fits an integer key too.
        XCTAssertEqual(try onOff.busValue(for: "On", key: key, type: .int32, current: nil), .int32(1))
    }

    func testNonStringUnmapResultIsConvertedToTheKeyType() throws {
        let transforms = try ChannelTransforms(map: nil, unmap: "length(value)")
        XCTAssertEqual(try transforms.busValue(for: "abc", key: key, type: .uint32, current: nil), .uint32(3))
        XCTAssertThrowsError(try transforms.busValue(for: "abc", key: key, type: .boolean, current: nil))
    }

    func testMalformedOrIllTypedExpressionsAreUsageErrors() throws {
        XCTAssertEqual(expectFailure { () throws(CommandFailure) in _ = try ChannelTransforms(map: "value +", unmap: nil) }?.code, .usage)
        let illTyped = try ChannelTransforms(map: "value + 1", unmap: nil)
        XCTAssertEqual(expectFailure { () throws(CommandFailure) in try illTyped.check(against: .boolean, key: self.key) }?.code, .usage)
    }

    func testDirectionOption() throws {
        XCTAssertEqual(try ChannelDirection(option: nil), .both)
        XCTAssertEqual(try ChannelDirection(option: "from"), .from)
        XCTAssertFalse(ChannelDirection.from.towardsBus)
        XCTAssertFalse(ChannelDirection.to.towardsLocal)
        XCTAssertEqual(expectFailure { () throws(CommandFailure) in _ = try ChannelDirection(option: "sideways") }?.code, .usage)
    }

    private func expectFailure(_ body: () throws(CommandFailure) -> Void) -> CommandFailure? {
        do {
            try body()
            XCTFail("expected a CommandFailure")
            return nil
        } catch {
            return error
        }
    }
}
