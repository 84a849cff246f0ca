import DBusValues
import XCTest

@testable import PropBus

/// Evaluation is bounded: no intermediate result may grow past the value size limit, and one
/// evaluation (or one chain of them) has a work budget.
final class ExpressionBudgetTests: XCTestCase {
    /// `value + value + …` with `terms` terms.
    private func bomb(_ terms: Int) throws -> PropBus.Expression {
        try PropBus.Expression(parsing: Array(repeating: "value", count: terms).joined(separator: " + "))
    }

    private func assertLimitsExceeded(file: StaticString = #filePath, line: UInt = #line, _ body: () throws -> DBusValue) {
        do {
            let result = try body()
            XCTFail("expected LimitsExceeded, got a \(result.wireSize())-byte result", file: file, line: line)
        } catch let error as PropBusError {
            XCTAssertEqual(error.code, .limitsExceeded, error.message, file: file, line: line)
        } catch {
            XCTFail("unexpected \(error)", file: file, line: line)
        }
    }

    func testConcatenationBombStopsAtTheSizeLimitBeforeBuildingIt() throws {
        let expression = try bomb(250)
        let megabyte = DBusValue.string(String(repeating: "x", count: 1 << 20))
        var budget = EvaluationBudget(maximumSize: 1 << 20)
        assertLimitsExceeded { try expression.evaluate(value: megabyte, budget: &budget) { _ in nil } }
    }

    func testIntermediateStringsAreHeldToTheLimitEvenWhenTheResultWouldBeSmall() throws {
        // length() of a too-large concatenation is a small number, but the string is built first.
        let expression = try PropBus.Expression(parsing: "length(value + value + value)")
        var budget = EvaluationBudget(maximumSize: 1000)
        assertLimitsExceeded { try expression.evaluate(value: .string(String(repeating: "y", count: 400)), budget: &budget) { _ in nil } }
        var roomy = EvaluationBudget(maximumSize: 1200)
        XCTAssertEqual(try expression.evaluate(value: .string(String(repeating: "y", count: 400)), budget: &roomy) { _ in nil }, .int64(1200))
    }

    func testWorkBudgetStopsManySmallSteps() throws {
        // Each intermediate stays below the limit, but together they copy far more than it.
        let expression = try bomb(250)
        let value = DBusValue.string(String(repeating: "z", count: 4000))
        var budget = EvaluationBudget(maximumSize: 1 << 20, work: 1 << 20)
        assertLimitsExceeded { try expression.evaluate(value: value, budget: &budget) { _ in nil } }
    }

    func testOneBudgetSpansSeveralEvaluations() throws {
        let expression = try PropBus.Expression(parsing: "value + value")
        var budget = EvaluationBudget(maximumSize: 1 << 20, work: 10_000)
        let value = DBusValue.string(String(repeating: "w", count: 1000))
        for _ in 0..<4 { _ = try expression.evaluate(value: value, budget: &budget) { _ in nil } }
        assertLimitsExceeded {
            for _ in 0..<10 { _ = try expression.evaluate(value: value, budget: &budget) { _ in nil } }
            return .string("")
        }
    }

    func testOrdinaryTransformsAreUnaffected() throws {
        let expression = try PropBus.Expression(parsing: "value == \"1\" ? upper(\"on\") + \"!\" : string(length(value))")
        XCTAssertEqual(try expression.evaluate(value: .string("1")) { _ in nil }, .string("ON!"))
        XCTAssertEqual(try expression.evaluate(value: .string("abc")) { _ in nil }, .string("3"))
    }

    func testBombFailsInMillisecondsNotSeconds() throws {
        let expression = try bomb(250)
        let megabyte = DBusValue.string(String(repeating: "x", count: 1 << 20))
        let start = ContinuousClock.now
        _ = try? expression.evaluate(value: megabyte) { _ in nil }
        let small = DBusValue.string(String(repeating: "x", count: 4000))
        _ = try? expression.evaluate(value: small) { _ in nil }
        // A generous bound: the unbounded evaluation took 32 s.
        XCTAssertLessThan(ContinuousClock.now - start, .seconds(2))
    }

    // MARK: Work is charged by the work done

    /// The units one evaluation of `source` spends, with `value` and `needle.text` = `needle`.
    private func unitsCharged(_ source: String, value: DBusValue, needle: DBusValue = .string("")) throws -> Int {
        let expression = try PropBus.Expression(parsing: source)
        var budget = EvaluationBudget(maximumSize: 1 << 20, work: Int.max / 2)
        let before = budget.remaining
        _ = try expression.evaluate(value: value, budget: &budget) { $0 == "needle.text" ? needle : nil }
        return before - budget.remaining
    }

    /// The comparisons the evaluator's substring search really makes, counted by elements that
    /// count every `==` and `<` asked of them.
    private func comparisons(searching haystack: String, for needle: String) throws -> Int {
        let counter = ComparisonCounter()
        // Composing decomposed text is real work too, several comparisons' worth a byte.
        let composing = { (bytes: Int) throws(PropBusError) in counter.count += bytes }
        _ = try ExpressionEvaluator.contains(ExpressionEvaluator.searchUnits(of: haystack, normalizing: composing).map { Counted($0, counter) },
                                             ExpressionEvaluator.searchUnits(of: needle, normalizing: composing).map { Counted($0, counter) }) {
            _, _ throws(PropBusError) in
        }
        return counter.count
    }

    /// Haystacks and needles that make a naive search compare far more than the haystack's
    /// length: a needle that matches a long way before failing, at every position.
    private var adversarialSearches: [(haystack: String, needle: String)] {
        let a = { (count: Int) in String(repeating: "a", count: count) }
        return [
            (String(repeating: a(39) + "c", count: 100), a(200) + "b"),
            (a(4000), a(199) + "b"),
            (a(2000), "b" + a(199)),
            (a(2000), a(99) + "b" + a(100)),
            (String(repeating: "ab", count: 2000), String(repeating: "ab", count: 100) + "c"),
            (String(repeating: "é", count: 2000), String(repeating: "é", count: 99) + "e"),
            (String(repeating: "e\u{301}", count: 2000), String(repeating: "e\u{301}", count: 99) + "x"),
            ("plain text", "text"),
            (String(repeating: "a\r\n", count: 1000), String(repeating: "a\r\n", count: 50) + "\r"),
        ]
    }

    func testContainsAnswersAsTheStandardLibraryDoes() throws {
        let cases: [(String, String)] = [
            ("abc", ""), ("", "a"), ("abc", "abc"), ("abc", "abcd"), ("aaab", "aab"), ("abababc", "ababc"),
            ("a\r\nb", "\r"), ("a\r\nb", "\n"), ("a\r\nb", "\r\n"), ("e\u{301}x", "e"), ("\u{e9}x", "e\u{301}"),
            ("caf\u{e9}", "\u{e9}"), ("x\u{212A}y", "K"), ("🇫🇷🇩🇪", "🇩🇪"), ("🇫🇷🇩🇪", "\u{1F1F7}\u{1F1E9}"),
        ]
        for (haystack, needle) in cases {
            let answer = try PropBus.Expression(parsing: "contains(value, needle.text)")
                .evaluate(value: .string(haystack)) { $0 == "needle.text" ? .string(needle) : nil }
            XCTAssertEqual(answer, .boolean(haystack.contains(needle)), "contains(\(haystack.debugDescription), \(needle.debugDescription))")
        }
    }

    func testContainsIsChargedAtLeastTheComparisonsItMakes() throws {
        for (haystack, needle) in adversarialSearches {
            let real = try comparisons(searching: haystack, for: needle)
            let charged = try unitsCharged("contains(value, needle.text)", value: .string(haystack), needle: .string(needle))
            XCTAssertGreaterThanOrEqual(charged, real, "contains() over \(haystack.utf8.count) bytes for a \(needle.utf8.count)-byte needle")
        }
    }

    func testContainsOverAnArrayIsChargedForEveryElementItCompares() throws {
        let items = Array(repeating: DBusValue.string(String(repeating: "x", count: 100)), count: 5000)
        let needle = String(repeating: "x", count: 99) + "y"
        let charged = try unitsCharged("contains(value, needle.text)", value: .array(element: .string, items), needle: .string(needle))
        // Each element is compared, and equal lengths make each comparison read its bytes.
        XCTAssertGreaterThanOrEqual(charged, items.count * 100)
    }

    func testEveryStringFunctionIsChargedAtLeastTheBytesItReads() throws {
        let text = String(repeating: "Ab c", count: 2500)
        for source in ["length(value)", "lower(value)", "upper(value)", "trim(value)", "string(value)", "int(value) == 1",
                       "startsWith(value, needle.text)", "endsWith(value, needle.text)", "value == needle.text",
                       "value < needle.text", "min(value, needle.text) == value"] {
            let charged = (try? unitsCharged(source, value: .string(text), needle: .string(text))) ?? Int.max
            XCTAssertGreaterThanOrEqual(charged, text.utf8.count, source)
        }
    }

    func testAnAdversarialContainsIsRefusedWithinTheDefaultBudget() throws {
        // The attack of A 4 KiB needle that nearly matches everywhere in a 1 MiB value.
        let value = DBusValue.string(String(repeating: String(repeating: "a", count: 39) + "c", count: (1 << 20) / 40))
        let needle = String(repeating: "a", count: 4095) + "b"
        let expression = try PropBus.Expression(parsing: Array(repeating: "!contains(value, needle.text)", count: 67).joined(separator: " && "))
        var budget = EvaluationBudget(maximumSize: 1 << 20)
        assertLimitsExceeded { try expression.evaluate(value: value, budget: &budget) { $0 == "needle.text" ? .string(needle) : nil } }
    }
}

/// Counts comparisons, shared by the elements of one search.
private final class ComparisonCounter {
    var count = 0
}

/// An element that counts each comparison made with it.
private struct Counted<Element: Comparable>: Comparable {
    let element: Element
    let counter: ComparisonCounter

    init(_ element: Element, _ counter: ComparisonCounter) {
        self.element = element
        self.counter = counter
    }

    static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.counter.count += 1
        return lhs.element == rhs.element
    }

    static func < (lhs: Self, rhs: Self) -> Bool {
        lhs.counter.count += 1
        return lhs.element < rhs.element
    }
}
