import CommandLineKit
import XCTest
@testable import propctl

/// Goldens of the help of the administration verbs: the help is the user's manual, and
/// propctl(1) and the completions are rendered from the same specs.
final class VerbHelpGoldenTests: XCTestCase {
    private let generator = HelpGenerator(root: PropctlSpec.root)

    func testDescribeHelp() {
        XCTAssertEqual(generator.help(for: ["describe"]), #"""
            Show everything about a key: type, default, range or choices, writers and more.

            Usage: propctl describe [OPTIONS] KEY

            Like gsettings describe, range and writable together: the type (by name and
            D-Bus code), the value and whether it is set or reads the default, the default,
            the range or choices, whether clients may write it and who, whether it is secret
            or persistent, where it was declared and its description. Values with control
            characters are printed escaped; --json prints them exactly. A stored value the
            definition does not admit is shown as hidden_value, with hidden_reason. When a
            layer file gives the key its value (docs/layers.md), layer and layer_source name
            the layer and the file, locked says whether a mandatory file locks it, and
            user_value is the user's own value a layer above hides.

            --field NAME prints that one field alone, for scripts: booleans as true or
            false, a range as its lower and upper bound separated by a space (empty when
            unbounded there), other values as get prints them; an absent field prints an
            empty line.

            Arguments:
              KEY                 The key to describe.

            Options:
                  --field NAME    Print only this field: key, type, value, layer,
                                  layer_source, locked, user_value, is_set, hidden_value,
                                  hidden_reason, default, range, choices, writable, writers,
                                  secret, persistent, scope, source, state_of, overrides,
                                  lifetime, description.

            Global options:
                  --system        Use the system bus.
                  --user          Use the session bus (the default).
                  --address ADDR  Use the bus at ADDR, e.g. unix:path=/run/bus.
                  --json          Print machine-readable JSON.
              -h, --help          Show this help and exit.
                  --version       Print the version and exit.
              Only one of --system, --user or --address may be given.

            Examples:
              # Describe a key
              propctl describe settings.volume

              # Whether clients may write it, as true or false
              propctl describe settings.volume --field writable

              # The same as JSON
              propctl --json describe settings.volume
            """#)
    }

    func testCreateCommandHelp() {
        XCTAssertEqual(generator.help(for: ["create-command"]), #"""
            Create a command that runs PROGRAM, or that a client serves with --handler.

            Usage: propctl create-command [OPTIONS] KEY [PROGRAM] [ARG...]

            Calls Manager.CreateCommand. PROGRAM ARG... run without a shell, in their own
            process group, with the input on stdin and in PROPBUS_INPUT; the result is what
            they print. Put -- before PROGRAM so that its own options are not read as
            propctl's. With --handler, no PROGRAM is given: 'propctl serve KEY -- CMD'
            serves the executions.

            --enabled-when EXPR enables the command only while the expression (see
            docs/expressions.md) is true, e.g. 'length(viewmodel.searchText) > 3'. Creating
            an existing command again replaces its definition.

            Arguments:
              KEY                      The command's key, e.g. jobs.upper.
              PROGRAM                  The program to run for each execution.
              ARG                      Its arguments.

            Options:
                  --handler            Executions are served by a client (propctl serve),
                                       not by PROGRAM.
                  --concurrent         Allow several executions at once (default: one at a
                                       time).
                  --enabled-when EXPR  Enable the command only while EXPR is true.
                  --timeout SECONDS    Cancel an execution that runs longer than this.
                  --writers LIST       Users or @groups, comma-separated, who may run it
                                       (system bus). May be repeated.
                  --description TEXT   What the command does.
                  --transient          Forget the command when propbusd stops.

            Global options:
                  --system             Use the system bus.
                  --user               Use the session bus (the default).
                  --address ADDR       Use the bus at ADDR, e.g. unix:path=/run/bus.
                  --json               Print machine-readable JSON.
              -h, --help               Show this help and exit.
                  --version            Print the version and exit.
              Only one of --system, --user or --address may be given.

            Examples:
              # Upper-case the input
              propctl create-command jobs.upper -- tr a-z A-Z

              # A search enabled only while the text is longer than 3 characters
              propctl create-command s.run --enabled-when 'length(s.text) > 3' -- ./s.sh

              # A job cancelled when it runs longer than 30 s
              propctl create-command jobs.slow --timeout 30 -- ./slow.sh

              # A command served by a client
              propctl create-command jobs.build --handler
            """#)
    }

    func testCancelHelp() {
        XCTAssertEqual(generator.help(for: ["cancel"]), #"""
            Cancel one running execution of a command, or all of them.

            Usage: propctl cancel [OPTIONS] KEY [ID]

            The execution fails with Cancelled: a process gets SIGTERM, then SIGKILL after
            the daemon's grace period. Without ID every running execution of KEY is
            cancelled (none running is not an error). 'propctl status' lists running
            executions with their ids; 'propctl exec' prints its execution's id on stderr.

            Arguments:
              KEY                 The command, e.g. viewmodel.executeSearch.
              ID                  The execution id.

            Global options:
                  --system        Use the system bus.
                  --user          Use the session bus (the default).
                  --address ADDR  Use the bus at ADDR, e.g. unix:path=/run/bus.
                  --json          Print machine-readable JSON.
              -h, --help          Show this help and exit.
                  --version       Print the version and exit.
              Only one of --system, --user or --address may be given.

            Examples:
              # Cancel execution 7
              propctl cancel viewmodel.executeSearch 7

              # Cancel every execution of a command
              propctl cancel viewmodel.executeSearch
            """#)
    }

    func testResetRecursiveHelp() {
        XCTAssertEqual(generator.help(for: ["reset"]), #"""
            Forget the stored value of a key, so that it reads its default again.

            Usage: propctl reset [OPTIONS] KEY|PREFIX

            The default is not written: a later change of the registered default shows
            through. With --recursive, every key of the group PREFIX and its subgroups is
            reset in one Manager.Apply: all of them or, if one is refused, none.

            Arguments:
              KEY|PREFIX          The key to reset, or with --recursive the group.

            Options:
              -r, --recursive     Reset every key of a group and its subgroups.

            Global options:
                  --system        Use the system bus.
                  --user          Use the session bus (the default).
                  --address ADDR  Use the bus at ADDR, e.g. unix:path=/run/bus.
                  --json          Print machine-readable JSON.
              -h, --help          Show this help and exit.
                  --version       Print the version and exit.
              Only one of --system, --user or --address may be given.

            Examples:
              # Go back to the default volume
              propctl reset settings.volume

              # Reset every setting
              propctl reset --recursive settings
            """#)
    }
}
