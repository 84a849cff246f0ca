import CommandLineKit

/// The subcommands that run commands and serve them.
enum ExecServeSpecs {
    /// `propctl exec KEY [INPUT]`
    static let exec = CommandSpec(
        name: "exec",
        abstract: "Run a command and print its result.",
        discussion: """
            Starts an execution of the command KEY, prints its id on stderr ("execution N of \
            KEY started") and waits for it to end; the result prints like a value (scalars \
            plain, containers as JSON). If the execution fails, the error name and message go to \
            stderr and the exit status is 1; a disabled command is refused with NotEnabled and \
            nothing runs. Ctrl-C (SIGINT) or SIGTERM cancels the execution, then propctl exits \
            130 or 143; if propbusd goes away meanwhile, 69. INPUT is sent as a string unless \
            --type names another D-Bus type, read like a VALUE of 'propctl set'. With --no-wait, \
            the execution id is printed on stdout and propctl returns at once.
            """,
        options: [
            .value("type", valueName: "TYPE", help: "The D-Bus type of INPUT (default s)."),
            .flag("no-wait", help: "Start the execution and print its id without waiting."),
        ],
        positionals: [
            .init("KEY", help: "The command, e.g. viewmodel.executeSearch.", completion: .dynamic("command")),
            .init("INPUT", help: "The execution's input (default: the empty string).", optional: true),
        ],
        examples: [
            .init("Run the search with its text", "propctl exec viewmodel.executeSearch cats"),
            .init("Start it and go on", "propctl exec --no-wait viewmodel.executeSearch cats"),
            .init("Pass a structured input", #"propctl exec --type 'a{sv}' jobs.build '{"target": "all"}'"#),
        ]
    )

    /// `propctl serve KEY -- CMD [ARG...]`
    static let serve = CommandSpec(
        name: "serve",
        abstract: "Handle a command's executions by running CMD for each one.",
        discussion: """
            Registers with propbusd as the handler of KEY, a command created with handler=true, \
            and runs CMD ARG... (without a shell) for every execution: the input as text on its \
            stdin and in PROPBUS_INPUT, the result from its stdout (without one trailing \
            newline). A non-zero exit fails the execution with ExecutionFailed and the end of \
            stderr. The command is enabled only while a handler is registered; propctl serves \
            until SIGINT or SIGTERM, and registers again when propbusd restarts.
            """,
        positionals: [
            .init("KEY", help: "The handler command to serve.", completion: .dynamic("command")),
            .init("CMD", help: "The program run for each execution (put -- before it)."),
            .init("ARG", help: "Its arguments.", optional: true, repeating: true),
        ],
        examples: [
            .init("Serve a command with a script", "propctl serve viewmodel.executeSearch -- ./search.sh"),
            .init("Upper-case every input", "propctl serve text.upper -- tr a-z A-Z"),
        ]
    )
}
