import CommandLineKit
/// The declaration of the whole `propctl` command line. `CommandLineParser` and
/// `HelpGenerator` both read it, so `propctl … --help` always describes what is accepted. The
/// subcommands are declared by area: ``KeySpecs``, ``BindingSpecs``, ``HistorySpecs``,
/// ``ExecServeSpecs``, ``CommandVerbSpecs``, ``DumpLoadSpecs``, ``AdministrationSpecs``.
enum PropctlSpec {
    /// The `propctl` root command: the global options and every subcommand.
    static let root = CommandSpec(
        name: "propctl",
        abstract: "Read, write and watch propbus properties on D-Bus.",
        discussion: """
            propctl talks to propbusd, by default on the session bus. VALUE arguments are read \
            according to the property's D-Bus type: scalars as plain text (true, 42, 3.5, hello), \
            containers as JSON (["a","b"], {"k": 1}). Put -- before a value that starts with a \
            dash but is not a number.
            """,
        options: [
            .flag("system", help: "Use the system bus."),
            .flag("user", help: "Use the session bus (the default)."),
            .value("address", valueName: "ADDR", help: "Use the bus at ADDR, e.g. unix:path=/run/bus."),
            .flag("json", help: "Print machine-readable JSON."),
            .help,
            .version,
        ],
        subcommands: [KeySpecs.get, KeySpecs.set, KeySpecs.reset, KeySpecs.list, KeySpecs.watch, CommandVerbSpecs.describe, KeySpecs.create,
                      KeySpecs.delete, KeySpecs.override, BindingSpecs.bind, BindingSpecs.bindings, BindingSpecs.unbind,
                      HistorySpecs.history, HistorySpecs.blame, HistorySpecs.revert, ExecServeSpecs.exec, ExecServeSpecs.serve,
                      CommandVerbSpecs.cancel, CommandVerbSpecs.createCommand, CommandVerbSpecs.deleteCommand, DumpLoadSpecs.dump,
                      DumpLoadSpecs.load, SettingsSpecs.importSettings, SettingsSpecs.exportSettings, AdministrationSpecs.status, AdministrationSpecs.reload, AdministrationSpecs.lock,
                      AdministrationSpecs.unlock, AdministrationSpecs.prune, AdministrationSpecs.codegen, CommandVerbSpecs.completion],
        exclusiveOptions: [["system", "user", "address"]],
        examples: [
            .init("Turn a switch on", "propctl set ui.switch.on true"),
            .init("Follow every change under settings", "propctl watch settings"),
            .init("Read a key on the system bus, as JSON", "propctl --system --json get settings.tags"),
            .init("Keep a file and a key in step, both ways", "propctl bind ui.theme --file ~/.config/theme"),
            .init("Run a command and print its result", "propctl exec viewmodel.executeSearch cats"),
        ],
        // gsettings, dconf and busctl verbs.
        familiarWords: ["monitor": "watch", "ls": "list", "rm": "delete", "show": "describe", "info": "describe",
                        "range": "describe --field range", "writable": "describe --field writable",
                        "read": "get", "write": "set", "get-property": "get", "set-property": "set", "introspect": "describe",
                        "list-recursively": "list", "list-keys": "list --names", "list-schemas": "list --groups",
                        "list-children": "list --groups", "list-locks": "list --locked", "reset-recursively": "reset --recursive",
                        "update": "reload"],
        exitStatuses: [
            .init("0", "success"),
            .init("1", "the daemon answered with a D-Bus error, or a value is invalid"),
            .init("64", "the command line is wrong"),
            .init("69", "the propbus service is unavailable"),
        ],
        environment: [
            .init("DBUS_SESSION_BUS_ADDRESS", "The session bus, used by default and with --user (libdbus reads it)."),
            .init("XDG_RUNTIME_DIR", "Without DBUS_SESSION_BUS_ADDRESS, the session bus is XDG_RUNTIME_DIR/bus."),
            .init("DBUS_SYSTEM_BUS_ADDRESS", "The system bus of --system, instead of /run/dbus/system_bus_socket."),
            .init("PROPBUS_INPUT", "Set by propctl serve for the program it runs: the execution's input, also on its stdin."),
        ],
        files: [
            .init("/run/dbus/system_bus_socket", "The system bus of --system."),
            .init("/etc/propbus/models, $XDG_CONFIG_HOME/propbus/models",
                  "Model files propbusd reads at start and on propctl reload (system and session bus)."),
            .init("/etc/propbus/mandatory.d, /etc/propbus/defaults.d, /usr/share/propbus/defaults.d",
                  "Layer files: locked values, site and vendor defaults (propbusd --config-dir, --vendor-dir; docs/layers.md). propbusd keeps the locks of propctl lock in mandatory.d/50-propctl.json."),
            .init("/usr/share/bash-completion/completions/propctl", "The bash completion (propctl completion bash); zsh's is /usr/share/zsh/vendor-completions/_propctl, fish's /usr/share/fish/vendor_completions.d/propctl.fish (from the package; scripts/install with its default PREFIX puts them in /usr/local/share/bash-completion/completions, /usr/local/share/zsh/site-functions and /etc/fish/completions)."),
        ]
    )
}
