import DBusValues
import XCTest

@testable import PropBus

/// The parser and evaluator must terminate on any input with a value or a propbus error:
/// never crash, hang or overflow the stack.
final class ExpressionFuzzTests: XCTestCase {
    /// A small deterministic generator (SplitMix64), so every run tries the same cases.
    private struct SplitMix64: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    private static let seeds = [
        #"value == "1" ? "On" : "Off""#,
        #"value == "On" ? "1" : "0""#,
        "length(viewmodel.searchText) > 3",
        "min(settings.count, 10) * 2 + max(1, 2.5, -3) / 4 % 3",
        "!(a.b && c.d) || e.f ? 'yes' : \"no\\n\\u00e9\"",
        "contains(lower(trim(viewmodel.searchText)), 'x') && startsWith(string(int('12')), '1')",
        "bool(value) != endsWith(upper(value), 'ON') ? double(value) : -1e3",
        "1a.b + -9223372036854775808 - 0.5e-2",
    ]

    private static let fragments = [
        "(", ")", "((", "))", "!", "-", "+", "*", "/", "%", "<", "<=", ">", ">=", "==", "!=", "&&", "||",
        "?", ":", ",", ".", "'", "\"", "\\", "\\u", "value", "a.b", "1", "1.", "1e", "e5", "9999999999999999999999",
        "length(", "min(", "foo(", "true", "false", " ", "\u{0}", "é", "\u{FFFD}", "..", "_", "0x1",
    ]

    private static let keys: [String: DBusValue] = [
        "viewmodel.searchText": .string("Hello x"),
        "settings.count": .int32(3),
        "a.b": .boolean(true),
        "c.d": .boolean(false),
        "e.f": .boolean(true),
        "1a.b": .uint64(5),
    ]

    /// Parses and, when that works, evaluates and type-checks `text`; anything but a value or a
    /// PropBusError fails the test.
    private func exercise(_ text: String) { Self.exercise(text) }

    private static func exercise(_ text: String) {
        let expression: PropBus.Expression
        do {
            expression = try Expression(parsing: text)
        } catch {
            XCTAssertEqual(error.code, .invalidExpression, text)
            XCTAssertFalse(error.message.isEmpty)
            return
        }
        for value: DBusValue? in [nil, .string("1"), .int32(-7), .boolean(true), .double(0.5)] {
            do {
                _ = try expression.evaluate(value: value) { Self.keys[$0] }
            } catch {
                XCTAssertEqual(error.code, .transformFailed, "\(text): \(error)")
            }
            do {
                _ = try expression.resultType(valueType: value?.type) { Self.keys[$0]?.type }
            } catch {
                XCTAssertEqual(error.code, .invalidExpression, "\(text): \(error)")
            }
        }
    }

    func testSeedsParse() throws {
        for seed in Self.seeds { XCTAssertNoThrow(try Expression(parsing: seed), seed) }
    }

    func testMutatedExpressionsTerminate() {
        var random = SplitMix64(state: 0x5EED)
        for _ in 0..<4000 {
            var scalars = Array(Self.seeds.randomElement(using: &random)!.unicodeScalars)
            for _ in 0..<Int.random(in: 1...6, using: &random) {
                let position = Int.random(in: 0...scalars.count, using: &random)
                switch Int.random(in: 0..<4, using: &random) {
                case 0 where position < scalars.count:
                    scalars.remove(at: position)
                case 1:
                    scalars.insert(contentsOf: Self.fragments.randomElement(using: &random)!.unicodeScalars, at: position)
                case 2 where position < scalars.count:
                    scalars[position] = Unicode.Scalar(UInt8.random(in: 0x20...0x7E, using: &random))
                default:
                    // Splice a slice of another seed in.
                    let other = Array(Self.seeds.randomElement(using: &random)!.unicodeScalars)
                    let start = Int.random(in: 0..<other.count, using: &random)
                    let end = Int.random(in: start...other.count, using: &random)
                    scalars.insert(contentsOf: other[start..<end], at: position)
                }
            }
            var text = String.UnicodeScalarView()
            text.append(contentsOf: scalars)
            exercise(String(text))
        }
    }

    func testRandomBytesTerminate() {
        var random = SplitMix64(state: 0xB17E5)
        for _ in 0..<3000 {
            let count = Int.random(in: 0...64, using: &random)
            let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &random) }
            exercise(String(decoding: bytes, as: UTF8.self))
        }
    }

    func testRandomTokenSoupTerminates() {
        var random = SplitMix64(state: 0x70CE)
        for _ in 0..<3000 {
            let count = Int.random(in: 1...30, using: &random)
            exercise((0..<count).map { _ in Self.fragments.randomElement(using: &random)! }.joined())
        }
    }

    func testDeepNestingIsRefusedNotOverflowed() {
        for text in [
            String(repeating: "(", count: 100_000),
            String(repeating: "(", count: 100_000) + "1" + String(repeating: ")", count: 100_000),
            String(repeating: "(", count: 4000),
            String(repeating: "(", count: 2000) + "1" + String(repeating: ")", count: 2000),
            String(repeating: "!", count: 4000) + "true",
            String(repeating: "-", count: 4095) + "1",
            String(repeating: "- ", count: 2000) + "1",
            String(repeating: "length(", count: 500),
            String(repeating: "min(1,", count: 600) + "1" + String(repeating: ")", count: 600),
            String(repeating: "1+", count: 2000) + "1",
            String(repeating: "1*", count: 2000) + "1",
            String(repeating: "true?", count: 1000) + "1" + String(repeating: ":1", count: 1000),
            String(repeating: "true?1:", count: 580) + "1",
            String(repeating: "'", count: 4096),
            String(repeating: "a.b==", count: 800) + "a.b",
        ] {
            exercise(text)
        }
        for depth in [255, 256, 257] {
            let text = String(repeating: "(", count: depth) + "1" + String(repeating: ")", count: depth)
            exercise(text)
        }
    }

    func testParsingOffTheMainThreadSurvivesTheDeepestAcceptedNesting() {
        // Dispatch threads have small stacks (512 KiB); the depth limit must fit them.
        let done = expectation(description: "parsed")
        DispatchQueue.global().async {
            for text in [
                String(repeating: "(", count: 255) + "1" + String(repeating: ")", count: 255),
                String(repeating: "-", count: 250) + "1",
                String(repeating: "length(", count: 250) + "'a'" + String(repeating: ")", count: 250),
            ] {
                if let expression = try? Expression(parsing: text) {
                    _ = try? expression.evaluate(value: nil) { _ in nil }
                    _ = try? expression.resultType(valueType: nil) { _ in nil }
                }
                Self.exercise(text)
            }
            done.fulfill()
        }
        wait(for: [done], timeout: 60)
    }
}
