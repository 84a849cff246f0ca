import CommandLineKit
import XCTest
@testable import propctl

final class HelpGeneratorTests: XCTestCase {
    private let generator = HelpGenerator(root: PropctlSpec.root)

    func testRootHelp() {
        XCTAssertEqual(generator.help(for: []), #"""
            Read, write and watch propbus properties on D-Bus.

            Usage: propctl [OPTIONS] SUBCOMMAND

            propctl talks to propbusd, by default on the session bus. VALUE arguments are
            read according to the property's D-Bus type: scalars as plain text (true, 42,
            3.5, hello), containers as JSON (["a","b"], {"k": 1}). Put -- before a value
            that starts with a dash but is not a number.

            Exit status:
              0   success
              1   the daemon answered with a D-Bus error, or a value is invalid
              64  the command line is wrong
              69  the propbus service is unavailable

            Options:
                  --system        Use the system bus.
                  --user          Use the session bus (the default).
                  --address ADDR  Use the bus at ADDR, e.g. unix:path=/run/bus.
                  --json          Print machine-readable JSON.
              -h, --help          Show this help and exit.
                  --version       Print the version and exit.
              Only one of --system, --user or --address may be given.

            Subcommands:
              get                 Print the current value of one or more keys.
              set                 Change the value of a key.
              reset               Forget the stored value of a key, so that it reads its
                                  default again.
              list                List keys with their types and current values.
              watch               Print every change to the watched keys until interrupted.
              describe            Show everything about a key: type, default, range or
                                  choices, writers and more.
              create              Register a key with a fixed D-Bus type.
              delete              Remove a key and its stored value.
              override            Hold a temporary value over a key while a command runs.
              bind                Bind a key two-way to a file, a coprocess, stdin/stdout or
                                  another key.
              bindings            List the daemon-side bindings.
              unbind              Remove a daemon-side binding.
              history             Show who changed keys, when, and from what.
              blame               Show who last changed each key of a group.
              revert              Put keys back as they were, from history.
              exec                Run a command and print its result.
              serve               Handle a command's executions by running CMD for each one.
              cancel              Cancel one running execution of a command, or all of them.
              create-command      Create a command that runs PROGRAM, or that a client
                                  serves with --handler.
              delete-command      Delete a command; its running executions fail with
                                  Cancelled.
              dump                Write keys, types and values as one JSON document.
              load                Apply a document written by 'propctl dump', atomically.
              import              Bring dconf's settings, GSettings schemas or dconf's
                                  system databases into propbus.
              export              Write keys in dconf's format, for 'dconf load'.
              status              Show whether propbusd is running, its version and its
                                  commands.
              reload              Make propbusd read its model files again (like systemctl
                                  reload).
              lock                Lock a key (or every key of GROUP.*) to a value, for
                                  everyone or --for some.
              unlock              Remove propctl's lock of a key (or GROUP.*).
              prune               Show, then with --yes delete, stored values that no
                                  definition claims.
              codegen             Print typed accessors for a model file's keys and commands
                                  (Swift).
              completion          Print a shell completion script for bash, zsh or fish.

            Examples:
              # Turn a switch on
              propctl set ui.switch.on true

              # Follow every change under settings
              propctl watch settings

              # Read a key on the system bus, as JSON
              propctl --system --json get settings.tags

              # Keep a file and a key in step, both ways
              propctl bind ui.theme --file ~/.config/theme

              # Run a command and print its result
              propctl exec viewmodel.executeSearch cats

            Run 'propctl SUBCOMMAND --help' for more about a subcommand.
            """#)
    }

    func testSetHelp() {
        XCTAssertEqual(generator.help(for: ["set"]), #"""
            Change the value of a key.

            Usage: propctl set [OPTIONS] KEY VALUE

            VALUE is read according to the property's type: scalars as plain text,
            containers as JSON. Setting the value a key already has changes nothing and
            emits no signal.

            Arguments:
              KEY                 The key to change, e.g. ui.switch.on.
              VALUE               The new value: plain text for a scalar, JSON for a
                                  container.

            Global options:
                  --system        Use the system bus.
                  --user          Use the session bus (the default).
                  --address ADDR  Use the bus at ADDR, e.g. unix:path=/run/bus.
                  --json          Print machine-readable JSON.
              -h, --help          Show this help and exit.
                  --version       Print the version and exit.
              Only one of --system, --user or --address may be given.

            Examples:
              # Turn a switch on
              propctl set ui.switch.on true

              # Replace a list of strings
              propctl set settings.tags '["a","b"]'

              # Write a negative number
              propctl set settings.offset -5
            """#)
    }

    func testUsageLinesFollowThePositionals() {
        XCTAssertEqual(generator.usage(for: []), "propctl [OPTIONS] SUBCOMMAND")
        XCTAssertEqual(generator.usage(for: ["get"]), "propctl get [OPTIONS] KEY...")
        XCTAssertEqual(generator.usage(for: ["list"]), "propctl list [OPTIONS] [PREFIX]")
        XCTAssertEqual(generator.usage(for: ["watch"]), "propctl watch [OPTIONS] [KEY|PREFIX...]")
        XCTAssertEqual(generator.usage(for: ["create"]), "propctl create [OPTIONS] KEY TYPE [CMD] [ARG...]")
        XCTAssertEqual(generator.usage(for: ["status"]), "propctl status [OPTIONS]")
    }

    func testUsageErrorTextPointsAtTheCommandsHelp() {
        let error = UsageError("missing argument VALUE", commandPath: ["set"])
        XCTAssertEqual(generator.errorText(for: error), """
            propctl set: missing argument VALUE
            Usage: propctl set [OPTIONS] KEY VALUE
            Run 'propctl set --help' for more information.
            """)
    }

    func testRepeatableOptionSaysSoInHelp() {
        XCTAssertTrue(generator.help(for: ["create"]).contains(
            "      --choice VALUE      Accept only this value. May be repeated."))
    }

    func testEveryHelpFitsEightyColumnsWithoutTrailingSpaces() {
        for path in [[]] + PropctlSpec.root.subcommands.map({ [$0.name] }) {
            for line in generator.help(for: path).split(separator: "\n") {
                XCTAssertLessThanOrEqual(line.count, 80, "\(path): \(line)")
                XCTAssertFalse(line.hasSuffix(" "), "\(path): '\(line)'")
            }
        }
    }

    func testLongHelpWrapsUnderItsColumn() {
        let spec = CommandSpec(name: "tool", abstract: "A tool.", options: [
            .flag("go", help: "Go somewhere far away, past the edge of this narrow terminal window."),
        ])
        XCTAssertEqual(HelpGenerator(root: spec, width: 40).help(for: []), """
            A tool.

            Usage: tool [OPTIONS]

            Options:
              --go  Go somewhere far away, past the
                    edge of this narrow terminal
                    window.
            """)
    }
}
