import CommandLineKit
import XCTest
@testable import propctl

final class CommandLineParserTests: XCTestCase {
    private let parser = CommandLineParser(root: PropctlSpec.root)

    // MARK: - Commands that parse

    func testSetTakesKeyAndValue() throws {
        let set = try command(["set", "ui.switch.on", "true"])
        XCTAssertEqual(set.path, ["set"])
        XCTAssertEqual(set.positional("KEY"), "ui.switch.on")
        XCTAssertEqual(set.positional("VALUE"), "true")
        XCTAssertFalse(set.flag("json"))
        XCTAssertNil(set.option("address"))
    }

    func testNegativeNumberIsAcceptedAsPositionalValue() throws {
        let set = try command(["set", "settings.offset", "-5"])
        XCTAssertEqual(set.positional("VALUE"), "-5")
        XCTAssertEqual(try command(["set", "settings.ratio", "-0.25"]).positional("VALUE"), "-0.25")
    }

    func testNegativeNumberIsAcceptedAsOptionValue() throws {
        let create = try command(["create", "settings.offset", "i", "--minimum", "-10", "--maximum=-1"])
        XCTAssertEqual(create.option("minimum"), "-10")
        XCTAssertEqual(create.option("maximum"), "-1")
    }

    func testJSONValueIsOnePositional() throws {
        XCTAssertEqual(try command(["set", "settings.tags", #"["a","b"]"#]).positional("VALUE"), #"["a","b"]"#)
    }

    func testGlobalOptionsAreAcceptedBeforeOrAfterTheSubcommand() throws {
        for arguments in [
            ["--json", "--address", "unix:path=/run/bus", "get", "a.b"],
            ["get", "a.b", "--json", "--address", "unix:path=/run/bus"],
            ["get", "--address=unix:path=/run/bus", "a.b", "--json"],
        ] {
            let get = try command(arguments)
            XCTAssertEqual(get.path, ["get"], "\(arguments)")
            XCTAssertTrue(get.flag("json"), "\(arguments)")
            XCTAssertEqual(get.option("address"), "unix:path=/run/bus", "\(arguments)")
            XCTAssertEqual(get.positionals("KEY"), ["a.b"], "\(arguments)")
        }
    }

    func testSubcommandOptionIsNotAcceptedBeforeTheSubcommand() {
        XCTAssertEqual(usageError(["--timestamps", "watch"]),
                       UsageError("unknown option '--timestamps'", commandPath: []))
    }

    func testDoubleDashMakesOptionLookingWordsPositional() throws {
        let set = try command(["set", "--json", "--", "ui.label", "--not-an-option"])
        XCTAssertTrue(set.flag("json"))
        XCTAssertEqual(set.positional("VALUE"), "--not-an-option")
    }

    func testHelpAfterDoubleDashIsAValue() throws {
        XCTAssertEqual(try command(["set", "ui.label", "--", "--help"]).positional("VALUE"), "--help")
    }

    func testRepeatableOptionCollectsEveryValueInOrder() throws {
        let create = try command(["create", "ui.theme", "s", "--choice", "light", "--choice=dark", "--choice", "auto"])
        XCTAssertEqual(create.options("choice"), ["light", "dark", "auto"])
        XCTAssertEqual(create.option("choice"), "auto")
    }

    func testCreateCollectsEveryOption() throws {
        let create = try command([
            "create", "settings.volume", "i", "--default", "50", "--transient", "--description", "How loud",
            "--read-only", "--minimum", "0", "--maximum", "100", "--value", "30",
        ])
        XCTAssertEqual(create.positional("KEY"), "settings.volume")
        XCTAssertEqual(create.positional("TYPE"), "i")
        XCTAssertEqual(create.option("default"), "50")
        XCTAssertEqual(create.option("description"), "How loud")
        XCTAssertEqual(create.option("value"), "30")
        XCTAssertTrue(create.flag("transient"))
        XCTAssertTrue(create.flag("read-only"))
        XCTAssertEqual(create.options("choice"), [])
    }

    func testRepeatingPositionalCollectsEveryKey() throws {
        XCTAssertEqual(try command(["get", "a.b", "c.d", "e.f"]).positionals("KEY"), ["a.b", "c.d", "e.f"])
    }

    func testOptionalPositionalsMayBeLeftOut() throws {
        XCTAssertNil(try command(["list"]).positional("PREFIX"))
        XCTAssertEqual(try command(["list", "settings"]).positional("PREFIX"), "settings")
        XCTAssertEqual(try command(["watch"]).positionals("KEY"), [])
        let watch = try command(["watch", "--timestamps", "ui", "settings.volume"])
        XCTAssertEqual(watch.positionals("KEY"), ["ui", "settings.volume"])
        XCTAssertTrue(watch.flag("timestamps"))
    }

    func testLoneDashIsAPositional() throws {
        XCTAssertEqual(try command(["set", "ui.label", "-"]).positional("VALUE"), "-")
    }

    // MARK: - Help and version

    func testHelpAnywhereAsksForTheHelpOfTheCommandReached() throws {
        XCTAssertEqual(try parser.parse(["--help"]), .help([]))
        XCTAssertEqual(try parser.parse(["-h"]), .help([]))
        XCTAssertEqual(try parser.parse(["set", "--help"]), .help(["set"]))
        XCTAssertEqual(try parser.parse(["set", "a.b", "-h"]), .help(["set"]))
        XCTAssertEqual(try parser.parse(["--help", "create"]), .help(["create"]))
    }

    func testHelpWinsOverOtherwiseBadArguments() throws {
        XCTAssertEqual(try parser.parse(["set", "--bogus", "--help"]), .help(["set"]))
        XCTAssertEqual(try parser.parse(["set", "a", "b", "c", "-h"]), .help(["set"]))
        XCTAssertEqual(try parser.parse(["get", "--address", "--help"]), .help(["get"]))
        XCTAssertEqual(try parser.parse(["nonsense", "--help"]), .help([]))
    }

    func testVersionOnTheRoot() throws {
        XCTAssertEqual(try parser.parse(["--version"]), .version)
    }

    // MARK: - Usage errors

    func testNoSubcommandIsAUsageError() {
        XCTAssertEqual(usageError([]), UsageError("missing subcommand", commandPath: []))
        XCTAssertEqual(usageError(["--json"]), UsageError("missing subcommand", commandPath: []))
    }

    func testUnknownSubcommandSuggestsTheNearestOne() {
        XCTAssertEqual(usageError(["sett", "a.b", "1"]),
                       UsageError("unknown subcommand 'sett'; did you mean 'set'?", commandPath: []))
        XCTAssertEqual(usageError(["frobnicate"]), UsageError("unknown subcommand 'frobnicate'", commandPath: []))
    }

    func testASwappedPairOfLettersIsOneTypo() {
        XCTAssertEqual(usageError(["lsit"]), UsageError("unknown subcommand 'lsit'; did you mean 'list'?", commandPath: []))
        XCTAssertEqual(usageError(["get", "--jsno", "a.b"]),
                       UsageError("unknown option '--jsno'; did you mean '--json'?", commandPath: ["get"]))
        XCTAssertEqual(editDistance("ab", "ba"), 1)
        XCTAssertEqual(editDistance("list", "lsit"), 1)
        XCTAssertEqual(editDistance("kitten", "sitting"), 3)
    }

    func testMissingPositionalNamesTheFirstOneWithoutAWord() {
        XCTAssertEqual(usageError(["set", "ui.switch.on"]),
                       UsageError("missing argument VALUE", commandPath: ["set"]))
        XCTAssertEqual(usageError(["set"]), UsageError("missing argument KEY", commandPath: ["set"]))
        XCTAssertEqual(usageError(["get"]), UsageError("missing argument KEY", commandPath: ["get"]))
    }

    func testExtraArgumentIsAUsageError() {
        XCTAssertEqual(usageError(["set", "a.b", "1", "2"]),
                       UsageError("unexpected argument '2'", commandPath: ["set"]))
        XCTAssertEqual(usageError(["status", "now"]), UsageError("unexpected argument 'now'", commandPath: ["status"]))
    }

    func testNegativeNumberWhereNoPositionalIsExpectedIsAnExtraArgument() {
        XCTAssertEqual(usageError(["reset", "a.b", "-5"]),
                       UsageError("unexpected argument '-5'", commandPath: ["reset"]))
    }

    func testUnknownOptionSuggestsTheNearestOne() {
        XCTAssertEqual(usageError(["get", "a.b", "--jsn"]),
                       UsageError("unknown option '--jsn'; did you mean '--json'?", commandPath: ["get"]))
        XCTAssertEqual(usageError(["get", "a.b", "--frobnicate"]),
                       UsageError("unknown option '--frobnicate'", commandPath: ["get"]))
        XCTAssertEqual(usageError(["get", "-x", "a.b"]), UsageError("unknown option '-x'", commandPath: ["get"]))
    }

    func testOptionValueMissingAtTheEndOrBeforeAnotherOption() {
        let missing = UsageError("option '--address' needs a value ADDR", commandPath: ["get"])
        XCTAssertEqual(usageError(["get", "a.b", "--address"]), missing)
        XCTAssertEqual(usageError(["get", "a.b", "--address", "--json"]), missing)
        XCTAssertEqual(usageError(["get", "a.b", "--address", "--", "x"]), missing)
    }

    func testFlagGivenAValueIsAUsageError() {
        XCTAssertEqual(usageError(["get", "a.b", "--json=yes"]),
                       UsageError("option '--json' takes no value", commandPath: ["get"]))
    }

    func testNonRepeatableOptionGivenTwiceIsAUsageError() {
        XCTAssertEqual(usageError(["create", "a.b", "i", "--default", "1", "--default", "2"]),
                       UsageError("option '--default' given more than once", commandPath: ["create"]))
    }

    func testBusSelectorsExcludeEachOther() {
        XCTAssertEqual(usageError(["--system", "get", "a.b", "--user"]),
                       UsageError("options '--system' and '--user' cannot be used together", commandPath: ["get"]))
        XCTAssertEqual(usageError(["--address", "unix:path=/x", "--system", "status"]),
                       UsageError("options '--system' and '--address' cannot be used together", commandPath: ["status"]))
    }

    func testBindEndpointsExcludeEachOther() {
        XCTAssertEqual(usageError(["bind", "a.b", "--file", "/tmp/x", "--stdio"]),
                       UsageError("options '--file' and '--stdio' cannot be used together", commandPath: ["bind"]))
        XCTAssertEqual(usageError(["bind", "a.b", "--exec", "cat", "--to", "c.d"]),
                       UsageError("options '--exec' and '--to' cannot be used together", commandPath: ["bind"]))
    }

    func testBindTakesExpressionsAndCoprocessArgumentsAfterDoubleDash() throws {
        let parsed = try command(["bind", "ui.on", "--exec", "prog", "--map", #"value ? "On" : "Off""#,
                                  "--direction", "from", "--", "-x", "--flag"])
        XCTAssertEqual(parsed.path, ["bind"])
        XCTAssertEqual(parsed.positional("KEY"), "ui.on")
        XCTAssertEqual(parsed.option("exec"), "prog")
        XCTAssertEqual(parsed.option("map"), #"value ? "On" : "Off""#)
        XCTAssertEqual(parsed.option("direction"), "from")
        XCTAssertEqual(parsed.positionals("ARG"), ["-x", "--flag"])
    }

    func testUnbindNeedsAPath() {
        XCTAssertEqual(usageError(["unbind"]), UsageError("missing argument PATH", commandPath: ["unbind"]))
    }

    // MARK: - Short options, on a spec of their own

    private let shortParser = CommandLineParser(root: CommandSpec(
        name: "tool",
        abstract: "A tool.",
        options: [.flag("verbose", short: "v", help: "Talk."), .help],
        subcommands: [CommandSpec(
            name: "run",
            abstract: "Run.",
            options: [
                .flag("quiet", short: "q", help: "Hush."),
                .value("output", short: "o", valueName: "FILE", help: "Where."),
            ],
            positionals: [.init("ARG", help: "An argument.", optional: true)]
        )]
    ))

    func testShortFlagsMayBeClustered() throws {
        guard case .command(let run) = try shortParser.parse(["run", "-vq"]) else { return XCTFail() }
        XCTAssertTrue(run.flag("verbose"))
        XCTAssertTrue(run.flag("quiet"))
    }

    func testShortValueOptionTakesTheRestOfTheClusterOrTheNextWord() throws {
        guard case .command(let attached) = try shortParser.parse(["run", "-qoout.txt"]) else { return XCTFail() }
        XCTAssertEqual(attached.option("output"), "out.txt")
        XCTAssertTrue(attached.flag("quiet"))
        guard case .command(let separate) = try shortParser.parse(["run", "-o", "out.txt", "x"]) else { return XCTFail() }
        XCTAssertEqual(separate.option("output"), "out.txt")
        XCTAssertEqual(separate.positional("ARG"), "x")
    }

    func testShortValueOptionWithoutValueIsAUsageError() {
        XCTAssertThrowsError(try shortParser.parse(["run", "-o"])) { error in
            XCTAssertEqual(error as? UsageError, UsageError("option '--output' needs a value FILE", commandPath: ["run"]))
        }
    }

    // MARK: - Helpers

    private func command(_ arguments: [String], file: StaticString = #filePath, line: UInt = #line) throws -> ParsedCommand {
        let result = try parser.parse(arguments)
        guard case .command(let parsed) = result else {
            XCTFail("expected a command, got \(result)", file: file, line: line)
            return ParsedCommand(path: [])
        }
        return parsed
    }

    private func usageError(_ arguments: [String], file: StaticString = #filePath, line: UInt = #line) -> UsageError? {
        do {
            let result = try parser.parse(arguments)
            XCTFail("expected a usage error, got \(result)", file: file, line: line)
            return nil
        } catch {
            return error
        }
    }
}
