import DBusValues
import XCTest

@testable import PropBus

/// The model keeps an upper bound of each group's `GetAll` body as entries change, so that a
/// write checks only what it changes (a 10k-property group had made every durable write size
/// the whole group). The bound must stay exact bookkeeping and never fall below the real size.
final class GroupReplyBoundTests: XCTestCase {
    private let limits = PropertyModel.Limits(maximumValueSize: 16 << 10, maximumMessageSize: 64 << 10)

    /// The exact `a{sv}` body `GetAll` sends for `group`.
    private func exactSize(_ model: PropertyModel, _ group: String) -> Int {
        let entries = model.names(inGroup: group).map { name in
            DictionaryEntry(.string(name), .variant(model.entry(for: Key(uncheckedGroup: group, name: name))!.value))
        }
        return DBusValue.dictionary(key: .string, value: .variant, entries).wireSize()
    }

    private func assertBoundIsKept(_ model: PropertyModel, _ group: String, file: StaticString = #filePath, line: UInt = #line) {
        let fresh = model.names(inGroup: group).reduce(0) { sum, name in
            sum + PropertyModel.replyBound(name: name, value: model.entry(for: Key(uncheckedGroup: group, name: name))!.value)
        }
        XCTAssertEqual(model.replyBound(ofGroup: group), fresh, "the kept bound drifted", file: file, line: line)
        XCTAssertGreaterThanOrEqual(fresh + 8, exactSize(model, group), "the bound is below the real size", file: file, line: line)
    }

    func testTheKeptBoundFollowsEveryKindOfChange() throws {
        let model = try PropertyModel(store: MemoryStore(), limits: limits)
        _ = try model.create(key: "g.a", type: "s", defaultValue: .string("x"), options: [:])
        _ = try model.create(key: "g.b", type: "v", defaultValue: .variant(.int64(1)), options: [:])
        _ = try model.create(key: "g.c", type: "a(ix)", defaultValue: .array(of: .structure([.int32, .int64]), []), options: [:])
        model.commitRound()
        assertBoundIsKept(model, "g")
        _ = try model.set("g.a", to: .string(String(repeating: "y", count: 1000)))
        _ = try model.set("g.b", to: .variant(.structure([.byte(1), .variant(.double(2))])))
        _ = try model.set("g.c", to: .array(of: .structure([.int32, .int64]), [.structure([.int32(1), .int64(2)])]))
        assertBoundIsKept(model, "g")
        _ = try model.apply(set: [("g.a", .string("short"))], reset: ["g.b"])
        assertBoundIsKept(model, "g")
        model.commitRound()
        _ = try model.delete(key: "g.c")
        _ = try model.set("g.a", to: .string(String(repeating: "z", count: 5000)))
        assertBoundIsKept(model, "g")
        model.rollbackRound()
        assertBoundIsKept(model, "g")
        XCTAssertEqual(model.names(inGroup: "g"), ["a", "b", "c"])
        for name in ["a", "b", "c"] { _ = try model.delete(key: "g.\(name)") }
        XCTAssertEqual(model.replyBound(ofGroup: "g"), 0)
    }

    func testAValueIsBoundedWhereverItFallsInTheReply() {
        // Layouts that depend on the offset: 8-aligned items after 4-aligned headers.
        let values: [DBusValue] = [
            .structure([.int32(1), .int64(2)]),
            .array(of: .array(.int64), [.array(of: .int64, [.int64(1)]), .array(of: .int64, [.int64(2), .int64(3)])]),
            .variant(.variant(.structure([.byte(1), .double(2)]))),
            .dictionary(key: .string, value: .variant, [DictionaryEntry(.string("k"), .variant(.int64(1)))]),
            .bytes([1, 2, 3]),
        ]
        for shift in 0..<8 {
            var entries = [DictionaryEntry(.string(String(repeating: "p", count: shift)), .variant(.byte(0)))]
            var bound = PropertyModel.replyBound(name: String(repeating: "p", count: shift), value: .byte(0))
            for (index, value) in values.enumerated() {
                entries.append(DictionaryEntry(.string("v\(index)"), .variant(value)))
                bound += PropertyModel.replyBound(name: "v\(index)", value: value)
            }
            let exact = DBusValue.dictionary(key: .string, value: .variant, entries).wireSize()
            XCTAssertGreaterThanOrEqual(bound + 8, exact, "shift \(shift)")
        }
    }

    func testAGroupIsRefusedOnlyWhenItsGetAllReallyWouldNotFit() throws {
        let model = try PropertyModel(store: MemoryStore(), limits: limits)
        let big = String(repeating: "x", count: 15 << 10)
        var accepted = 0
        for index in 0..<8 {
            _ = try model.create(key: "g.k\(index)", type: "s", defaultValue: .string(""), options: [:])
            do {
                _ = try model.set("g.k\(index)", to: .string(big))
                accepted += 1
            } catch {
                XCTAssertEqual(error.code, .limitsExceeded, error.message)
                break
            }
        }
        // 64 KiB less the 4 KiB header allowance holds three 15 KiB strings, not four.
        XCTAssertEqual(accepted, 3)
        XCTAssertLessThanOrEqual(exactSize(model, "g"), (64 << 10) - 4096)
        // Shrinking a value is allowed even near the limit.
        _ = try model.set("g.k0", to: .string("small"))
        assertBoundIsKept(model, "g")
    }
}
