import CommandLineKit
import XCTest
@testable import propctl

/// The one prefix rule and the escaping of text output, without a daemon.
final class KeyPrefixAndEscapingTests: XCTestCase {
    func testAPrefixIsAGroupAndItsSubgroupsNeverAStringPrefix() {
        let view = KeyPrefix("view")
        XCTAssertTrue(view.matches("view.a"))
        XCTAssertTrue(view.matches("view.sub.b"))
        XCTAssertFalse(view.matches("viewmodel.a"))
        XCTAssertFalse(view.matches("vie.a"))
        XCTAssertEqual(KeyPrefix("view.").text, "view")
        XCTAssertTrue(KeyPrefix("view.a").matches("view.a"), "a key selects itself")
        XCTAssertTrue(KeyPrefix("").matches("anything.at.all"))
    }

    func testControlCharactersAndBackslashesAreEscapedAndNothingElse() {
        XCTAssertEqual(Output.escaped("plain text, ünïcode"), "plain text, ünïcode")
        XCTAssertEqual(Output.escaped("a\tb\nc\rd"), "a\\tb\\nc\\rd")
        XCTAssertEqual(Output.escaped("back\\slash"), "back\\\\slash")
        XCTAssertEqual(Output.escaped("\u{1b}[31m\u{7f}"), "\\x1b[31m\\x7f")
    }

    func testEverySubcommandIsInEveryCompletionScript() {
        let scripts = CompletionScript(root: PropctlSpec.root)
        for command in PropctlSpec.root.subcommands {
            XCTAssertTrue(scripts.bash().contains("    \(command.name)) opts="), "bash: \(command.name)")
            XCTAssertTrue(scripts.fish().contains("-a \(command.name) -d"), "fish: \(command.name)")
            for option in command.options {
                XCTAssertTrue(scripts.bash().contains(option.longFlag), "bash: \(command.name) \(option.longFlag)")
            }
        }
        XCTAssertNil(scripts.script(for: "tcsh"))
    }

    func testManPageHasEveryCommandAndEscapesRoff() {
        let page = ManPage(root: PropctlSpec.root, version: "1", seeAlso: ["propbusd(8)"]).render()
        XCTAssertTrue(page.hasPrefix(".TH PROPCTL 1 "))
        for command in PropctlSpec.root.subcommands {
            XCTAssertTrue(page.contains(".SS \"\(ManPage.escape(command.name))"), command.name)
        }
        XCTAssertEqual(ManPage.escape(".starts with a dot -x \\"), "\\&.starts with a dot \\-x \\e")
        XCTAssertFalse(page.split(separator: "\n").contains { $0.hasPrefix("'") }, "a line starting with ' is a roff request")
    }
}
