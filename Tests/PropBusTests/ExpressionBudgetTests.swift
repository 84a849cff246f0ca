import DBus
import XCTest

@testable import PropBus

/// Evaluation is bounded: no intermediate result may grow past the value size limit, and one
/// evaluation (or one chain of them) has a work budget (issue 10, item 6).
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
}
