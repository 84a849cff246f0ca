import CommandLineKit
import XCTest
@testable import propctl

/// Pins properties of the CLI declaration that the parser and help rely on.
final class PropctlSpecTests: XCTestCase {
    private let root = PropctlSpec.root

    /// The contract's subcommands, the administration verbs, `reload` and `prune` (docs/model-files.md), `override`, `lock` and
    /// `unlock` (docs/layers.md), `import` and `export` (dconf's and GSettings' files, docs/dconf.md), and `codegen` (typed
    /// Swift accessors for the client library).
    func testSubcommandsAreThoseOfTheContract() {
        XCTAssertEqual(root.subcommands.map(\.name),
                       ["get", "set", "reset", "list", "watch", "describe", "create", "delete", "override", "bind", "bindings", "unbind",
                        "history", "blame", "revert", "exec", "serve", "cancel", "create-command", "delete-command", "dump", "load", "import", "export", "status", "reload", "lock", "unlock", "prune", "codegen", "completion"])
        XCTAssertEqual(root.options.map(\.long), ["system", "user", "address", "json", "help", "version"])
    }

    func testEveryExampleParsesAsTheCommandItIllustrates() throws {
        let parser = CommandLineParser(root: root)
        for command in [root] + root.subcommands {
            XCTAssertFalse(command.examples.isEmpty, "\(command.name) has no example")
            for example in command.examples {
                let words = shellWords(example.commandLine)
                XCTAssertEqual(words.first, "propctl", example.commandLine)
                let result = try parser.parse(words.dropFirst())
                guard case .command(let parsed) = result else {
                    XCTFail("\(example.commandLine) gave \(result)")
                    continue
                }
                if command.name != root.name {
                    XCTAssertEqual(parsed.path, [command.name], example.commandLine)
                }
            }
        }
    }

    /// Words gsettings, dconf and busctl users type get the propctl command line instead.
    func testFamiliarVerbsFromOtherToolsAreAnsweredWithPropctlsOwn() {
        let parser = CommandLineParser(root: root)
        let expected = ["monitor": "watch", "ls": "list", "rm": "delete", "show": "describe",
                        "range": "describe --field range", "writable": "describe --field writable", "read": "get", "write": "set",
                        "list-recursively": "list", "list-keys": "list --names", "reset-recursively": "reset --recursive"]
        for (word, answer) in expected {
            XCTAssertThrowsError(try parser.parse([word, "settings.volume"])) { error in
                XCTAssertTrue("\(error)".contains("did you mean '\(answer)'?"), "\(word): \(error)")
            }
        }
    }

    /// The help adds "May be repeated." to a repeatable option: its own text must not say so too.
    func testNoRepeatableOptionSaysSoItself() {
        for command in [root] + root.subcommands {
            for option in command.options where option.isRepeatable {
                XCTAssertFalse(option.help.lowercased().contains("repeat"), "\(command.name) --\(option.long): \(option.help)")
            }
        }
    }

    func testNoSubcommandOptionShadowsAGlobalOne() {
        let globals = Set(root.options.map(\.long))
        // history's --user USER is the history filter by user name; the global --user (the session
        // bus, the default anyway) still works before the subcommand's name.
        let allowed: [String: Set<String>] = ["history": ["user"]]
        for command in root.subcommands {
            XCTAssertTrue(globals.isDisjoint(with: Set(command.options.map(\.long)).subtracting(allowed[command.name] ?? [])), command.name)
        }
    }

    func testOnlyTheLastPositionalMayRepeat() {
        for command in root.subcommands {
            for positional in command.positionals.dropLast() {
                XCTAssertFalse(positional.isRepeating, "\(command.name) \(positional.name)")
            }
        }
    }

    /// Splits a command line as a POSIX shell would, for the quoting the examples use.
    private func shellWords(_ line: String) -> [String] {
        var words: [String] = []
        var word = ""
        var inWord = false
        var quote: Character?
        for character in line {
            if let open = quote {
                if character == open { quote = nil } else { word.append(character) }
            } else if character == "'" || character == "\"" {
                quote = character
                inWord = true
            } else if character == " " {
                if inWord { words.append(word) }
                word = ""
                inWord = false
            } else {
                word.append(character)
                inWord = true
            }
        }
        if inWord { words.append(word) }
        return words
    }
}
