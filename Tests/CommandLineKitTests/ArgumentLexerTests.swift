import XCTest
@testable import CommandLineKit

final class ArgumentLexerTests: XCTestCase {
    func testPlainWordsAreValues() {
        XCTAssertEqual(ArgumentLexer.tokenize(["set", "ui.switch.on", "true"]),
                       [.value("set"), .value("ui.switch.on"), .value("true")])
    }

    func testLongOptionWithAndWithoutAttachedValue() {
        XCTAssertEqual(ArgumentLexer.tokenize(["--json", "--address=unix:path=/run/bus", "--description="]), [
            .longOption("json", value: nil),
            .longOption("address", value: "unix:path=/run/bus"),
            .longOption("description", value: ""),
        ])
    }

    func testShortOptionsKeepTheirCluster() {
        XCTAssertEqual(ArgumentLexer.tokenize(["-h", "-abc"]), [.shortOptions("h"), .shortOptions("abc")])
    }

    func testDoubleDashTurnsEverythingAfterItIntoValues() {
        XCTAssertEqual(ArgumentLexer.tokenize(["get", "--", "--json", "-h", "--"]),
                       [.value("get"), .terminator, .value("--json"), .value("-h"), .value("--")])
    }

    func testNegativeNumbersAreValuesNotOptions() {
        XCTAssertEqual(ArgumentLexer.tokenize(["-5", "-3.5", "-.5", "-1e3", "-0"]),
                       [.value("-5"), .value("-3.5"), .value("-.5"), .value("-1e3"), .value("-0")])
    }

    func testWordsThatOnlyStartLikeNumbersStayOptions() {
        XCTAssertEqual(ArgumentLexer.tokenize(["-inf", "-nan", "-5x"]),
                       [.shortOptions("inf"), .shortOptions("nan"), .shortOptions("5x")])
    }

    func testLoneDashIsAValue() {
        XCTAssertEqual(ArgumentLexer.tokenize(["-"]), [.value("-")])
    }
}
