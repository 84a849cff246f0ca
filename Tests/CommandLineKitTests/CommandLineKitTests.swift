import CommandLineKit
import XCTest

/// The shared parser on a small tree of its own, so that it is pinned apart from either program.
final class CommandLineKitTests: XCTestCase {
    private let root = CommandSpec(
        name: "tool",
        abstract: "A tool.",
        options: [.flag("verbose", short: "v", help: "Say more."), .value("config", short: "c", valueName: "FILE", help: "Read FILE."),
                  .value("tag", valueName: "T", help: "A tag.", repeatable: true), .flag("red", help: "Red."),
                  .flag("blue", help: "Blue."), .version, .help],
        subcommands: [CommandSpec(name: "copy", abstract: "Copy.",
                                  positionals: [PositionalSpec("FROM", help: "Source."), PositionalSpec("TO", help: "Target.", optional: true)])],
        exclusiveOptions: [["red", "blue"]]
    )
    private var parser: CommandLineParser { CommandLineParser(root: root) }

    private func command(_ arguments: [String]) throws -> ParsedCommand {
        guard case .command(let command) = try parser.parse(arguments) else { throw UsageError("not a command", commandPath: []) }
        return command
    }

    private func message(_ arguments: [String]) -> String? {
        do { _ = try parser.parse(arguments); return nil } catch { return error.message }
    }

    func testOptionsBeforeAndAfterTheSubcommand() throws {
        let copy = try command(["-v", "copy", "a", "--config=x.json", "--tag", "1", "--tag", "2"])
        XCTAssertEqual(copy.path, ["copy"])
        XCTAssertTrue(copy.flag("verbose"))
        XCTAssertEqual(copy.option("config"), "x.json")
        XCTAssertEqual(copy.options("tag"), ["1", "2"])
        XCTAssertEqual(copy.positional("FROM"), "a")
        XCTAssertNil(copy.positional("TO"))
        XCTAssertEqual(try command(["copy", "-cfile", "--", "-a", "-b"]).positionals("TO"), ["-b"])
    }

    func testUsageErrors() {
        XCTAssertEqual(message(["--verbos"]), "unknown option '--verbos'; did you mean '--verbose'?")
        XCTAssertEqual(message(["cpoy"]), "unknown subcommand 'cpoy'; did you mean 'copy'?")
        XCTAssertEqual(message(["copy"]), "missing argument FROM")
        XCTAssertEqual(message(["copy", "a", "b", "c"]), "unexpected argument 'c'")
        XCTAssertEqual(message(["copy", "a", "--config"]), "option '--config' needs a value FILE")
        XCTAssertEqual(message(["copy", "a", "--red=1"]), "option '--red' takes no value")
        XCTAssertEqual(message(["copy", "a", "-c", "x", "-c", "y"]), "option '--config' given more than once")
        XCTAssertEqual(message(["copy", "a", "--red", "--blue"]), "options '--red' and '--blue' cannot be used together")
        XCTAssertEqual(message([]), "missing subcommand")
    }

    func testHelpWinsAndVersion() throws {
        XCTAssertEqual(try parser.parse(["copy", "--bogus", "-h"]), .help(["copy"]))
        XCTAssertEqual(try parser.parse(["--version"]), .version)
    }

    func testHelpIsGeneratedFromTheSpec() {
        XCTAssertEqual(HelpGenerator(root: root).help(for: ["copy"]), """
            Copy.

            Usage: tool copy [OPTIONS] FROM [TO]

            Arguments:
              FROM               Source.
              TO                 Target.

            Global options:
              -v, --verbose      Say more.
              -c, --config FILE  Read FILE.
                  --tag T        A tag. May be repeated.
                  --red          Red.
                  --blue         Blue.
                  --version      Print the version and exit.
              -h, --help         Show this help and exit.
              Only one of --red or --blue may be given.
            """)
    }

    func testManPageItemsAndEscaping() {
        XCTAssertEqual(ManPage.option(.value("config", short: "c", valueName: "FILE", help: "Read FILE.")),
                       [".TP", "\\fB\\-c\\fR, \\fB\\-\\-config\\fR \\fIFILE\\fR", "Read FILE."])
        XCTAssertEqual(ManPage.escape(".a-b\\c"), "\\&.a\\-b\\ec")
    }

    func testSuggestionsAreNearMissesOnly() {
        XCTAssertEqual(closest(to: "lsit", among: ["list", "get"]), "list")
        XCTAssertNil(closest(to: "xyz", among: ["list", "get"]))
        XCTAssertEqual(editDistance("kitten", "sitting"), 3)
    }
}
