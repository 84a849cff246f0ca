import CommandLineKit

/// The subcommands of commands (create, delete, cancel), describe and completion.
enum CommandVerbSpecs {
    /// `propctl create-command KEY [options] -- PROGRAM [ARG...]`
    static let createCommand = CommandSpec(
        name: "create-command",
        abstract: "Create a command that runs PROGRAM, or that a client serves with --handler.",
        discussion: """
            Calls Manager.CreateCommand. PROGRAM ARG... run without a shell, in their own process \
            group, with the input on stdin and in PROPBUS_INPUT; the result is what they print. \
            Put -- before PROGRAM so that its own options are not read as propctl's. With \
            --handler, no PROGRAM is given: 'propctl serve KEY -- CMD' serves the executions.

            --enabled-when EXPR enables the command only while the expression (see \
            docs/expressions.md) is true, e.g. 'length(viewmodel.searchText) > 3'. Creating an \
            existing command again replaces its definition.
            """,
        options: [
            .flag("handler", help: "Executions are served by a client (propctl serve), not by PROGRAM."),
            .flag("concurrent", help: "Allow several executions at once (default: one at a time)."),
            .value("enabled-when", valueName: "EXPR", help: "Enable the command only while EXPR is true."),
            .value("timeout", valueName: "SECONDS", help: "Cancel an execution that runs longer than this."),
            .value("writers", valueName: "LIST", help: "Users or @groups, comma-separated, who may run it (system bus).", repeatable: true),
            .value("description", valueName: "TEXT", help: "What the command does."),
            .flag("transient", help: "Forget the command when propbusd stops."),
        ],
        positionals: [
            .init("KEY", help: "The command's key, e.g. jobs.upper."),
            .init("PROGRAM", help: "The program to run for each execution.", optional: true),
            .init("ARG", help: "Its arguments.", optional: true, repeating: true),
        ],
        examples: [
            .init("Upper-case the input", "propctl create-command jobs.upper -- tr a-z A-Z"),
            .init("A search enabled only while the text is longer than 3 characters",
                  "propctl create-command s.run --enabled-when 'length(s.text) > 3' -- ./s.sh"),
            .init("A job cancelled when it runs longer than 30 s", "propctl create-command jobs.slow --timeout 30 -- ./slow.sh"),
            .init("A command served by a client", "propctl create-command jobs.build --handler"),
        ]
    )

    /// `propctl delete-command KEY`
    static let deleteCommand = CommandSpec(
        name: "delete-command",
        abstract: "Delete a command; its running executions fail with Cancelled.",
        positionals: [.init("KEY", help: "The command to delete.", completion: .dynamic("command"))],
        examples: [.init("Delete a command", "propctl delete-command jobs.upper")]
    )

    /// `propctl cancel KEY [ID]`
    static let cancel = CommandSpec(
        name: "cancel",
        abstract: "Cancel one running execution of a command, or all of them.",
        discussion: """
            The execution fails with Cancelled: a process gets SIGTERM, then SIGKILL after the \
            daemon's grace period. Without ID every running execution of KEY is cancelled (none \
            running is not an error). 'propctl status' lists running executions with their ids; \
            'propctl exec' prints its execution's id on stderr.
            """,
        positionals: [
            .init("KEY", help: "The command, e.g. viewmodel.executeSearch.", completion: .dynamic("command")),
            .init("ID", help: "The execution id.", optional: true),
        ],
        examples: [
            .init("Cancel execution 7", "propctl cancel viewmodel.executeSearch 7"),
            .init("Cancel every execution of a command", "propctl cancel viewmodel.executeSearch"),
        ]
    )

    /// `propctl describe KEY`
    static let describe = CommandSpec(
        name: "describe",
        abstract: "Show everything about a key: type, default, range or choices, writers and more.",
        discussion: """
            Like gsettings describe, range and writable together: the type (by name and D-Bus \
            code), the value and whether it is set or reads the default, the default, the range \
            or choices, whether clients may write it and who, whether it is secret or \
            persistent, where it was declared and its description. Values with control \
            characters are printed escaped; --json prints them exactly. A stored value the             definition does not admit is shown as hidden_value, with hidden_reason. When a \
            layer file gives the key its value (docs/layers.md), layer and layer_source name the \
            layer and the file, locked says whether a mandatory file locks it, and user_value \
            is the user's own value a layer above hides.

            --field NAME prints that one field alone, for scripts: booleans as true or false,             a range as its lower and upper bound separated by a space (empty when unbounded             there), other values as get prints them; an absent field prints an empty line.
            """,
        options: [.value("field", valueName: "NAME", help: "Print only this field: \(DescribeVerb.fields.joined(separator: ", ")).",
                         completion: .choices(DescribeVerb.fields))],
        positionals: [.init("KEY", help: "The key to describe.", completion: .dynamic("key"))],
        examples: [
            .init("Describe a key", "propctl describe settings.volume"),
            .init("Whether clients may write it, as true or false", "propctl describe settings.volume --field writable"),
            .init("The same as JSON", "propctl --json describe settings.volume"),
        ]
    )

    /// `propctl completion bash|zsh|fish`
    static let completion = CommandSpec(
        name: "completion",
        abstract: "Print a shell completion script for bash, zsh or fish.",
        discussion: """
            The script completes subcommands and options from the same declaration as this help, \
            and keys by asking the running daemon (propctl list). scripts/install puts the \
            scripts where each shell looks for them.
            """,
        positionals: [.init("SHELL", help: "bash, zsh or fish.", completion: .choices(["bash", "zsh", "fish"]))],
        examples: [
            .init("Print the bash script (try it with: source <(propctl completion bash))", "propctl completion bash"),
            .init("Print the fish script, for ~/.config/fish/completions/propctl.fish", "propctl completion fish"),
        ]
    )
}
