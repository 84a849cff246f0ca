/// The declaration of the whole `propctl` command line. `CommandLineParser` and
/// `HelpGenerator` both read it, so `propctl … --help` always describes what is accepted.
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

            Exit status:
              0   success
              1   the daemon answered with a D-Bus error
              64  the command line is wrong
              69  the propbus service is unavailable
            """,
        options: [
            .flag("system", help: "Use the system bus."),
            .flag("user", help: "Use the session bus (the default)."),
            .value("address", valueName: "ADDR", help: "Use the bus at ADDR, e.g. unix:path=/run/bus."),
            .flag("json", help: "Print machine-readable JSON."),
            .help,
            .version,
        ],
        subcommands: [get, set, reset, list, watch, create, delete, status],
        exclusiveOptions: [["system", "user", "address"]],
        examples: [
            .init("Turn a switch on", "propctl set ui.switch.on true"),
            .init("Follow every change under settings", "propctl watch settings"),
            .init("Read a key on the system bus, as JSON", "propctl --system --json get settings.tags"),
        ]
    )

    /// `propctl get KEY...`
    static let get = CommandSpec(
        name: "get",
        abstract: "Print the current value of one or more keys.",
        discussion: "Scalars print as plain text and containers as JSON, one line per key in the order given.",
        positionals: [.init("KEY", help: "A key such as ui.switch.on.", repeating: true)],
        examples: [
            .init("Read one key", "propctl get ui.switch.on"),
            .init("Read several keys as one JSON object", "propctl --json get settings.volume settings.tags"),
        ]
    )

    /// `propctl set KEY VALUE`
    static let set = CommandSpec(
        name: "set",
        abstract: "Change the value of a key.",
        discussion: """
            VALUE is read according to the property's type: scalars as plain text, containers as \
            JSON. Setting the value a key already has changes nothing and emits no signal.
            """,
        positionals: [
            .init("KEY", help: "The key to change, e.g. ui.switch.on."),
            .init("VALUE", help: "The new value: plain text for a scalar, JSON for a container."),
        ],
        examples: [
            .init("Turn a switch on", "propctl set ui.switch.on true"),
            .init("Replace a list of strings", #"propctl set settings.tags '["a","b"]'"#),
            .init("Write a negative number", "propctl set settings.offset -5"),
        ]
    )

    /// `propctl reset KEY`
    static let reset = CommandSpec(
        name: "reset",
        abstract: "Forget the stored value of a key, so that it reads its default again.",
        discussion: "The default is not written: a later change of the registered default shows through.",
        positionals: [.init("KEY", help: "The key to reset.")],
        examples: [.init("Go back to the default volume", "propctl reset settings.volume")]
    )

    /// `propctl list [PREFIX]`
    static let list = CommandSpec(
        name: "list",
        abstract: "List keys with their types and current values.",
        discussion: "Without PREFIX every key is listed. On a terminal the output is an aligned table.",
        positionals: [.init("PREFIX", help: "List only keys in this group, e.g. settings.", optional: true)],
        examples: [
            .init("List everything", "propctl list"),
            .init("List the settings group as JSON", "propctl --json list settings"),
        ]
    )

    /// `propctl watch [KEY|PREFIX...]`
    static let watch = CommandSpec(
        name: "watch",
        abstract: "Print every change to the watched keys until interrupted.",
        discussion: """
            Each change prints one line: the key and its new value. Without arguments every key \
            is watched; a group name watches every key in it.
            """,
        options: [.flag("timestamps", help: "Start each line with the time of the change.")],
        positionals: [
            .init("KEY", display: "KEY|PREFIX", help: "A key, or a group of keys, to watch.",
                  optional: true, repeating: true),
        ],
        examples: [
            .init("Follow one switch", "propctl watch ui.switch.on"),
            .init("Follow a whole group, with times", "propctl watch --timestamps settings"),
        ]
    )

    /// `propctl create KEY TYPE [options]`
    static let create = CommandSpec(
        name: "create",
        abstract: "Register a key with a fixed D-Bus type.",
        discussion: """
            Values given to --default, --minimum, --maximum, --choice and --value are read like \
            set's VALUE. Creating an existing key again with the same type updates its metadata \
            and keeps its value; another type fails with TypeMismatch.
            """,
        options: [
            .value("default", valueName: "VALUE", help: "The value read while none is stored."),
            .flag("transient", help: "Keep the value in memory only; it is lost when propbusd stops."),
            .value("description", valueName: "TEXT", help: "What the key is for."),
            .flag("read-only", help: "Refuse writes from clients."),
            .value("minimum", valueName: "VALUE", help: "The smallest value accepted (numeric types)."),
            .value("maximum", valueName: "VALUE", help: "The largest value accepted (numeric types)."),
            .value("choice", valueName: "VALUE", help: "Accept only this value.", repeatable: true),
            .value("value", valueName: "VALUE", help: "An initial value, set only if none is stored."),
        ],
        positionals: [
            .init("KEY", help: "The key to create, e.g. settings.volume."),
            .init("TYPE", help: "A single complete D-Bus type, e.g. b, i, d, s, as or a{sv}."),
        ],
        examples: [
            .init("A volume from 0 to 100", "propctl create settings.volume i --default 50 --minimum 0 --maximum 100"),
            .init("A search field that is not persisted", "propctl create viewmodel.searchText s --transient"),
            .init("A theme with fixed choices", "propctl create ui.theme s --default light --choice light --choice dark"),
        ]
    )

    /// `propctl delete KEY`
    static let delete = CommandSpec(
        name: "delete",
        abstract: "Remove a key and its stored value.",
        positionals: [.init("KEY", help: "The key to remove.")],
        examples: [.init("Remove a key", "propctl delete settings.volume")]
    )

    /// `propctl status`
    static let status = CommandSpec(
        name: "status",
        abstract: "Show whether propbusd is running, and its version.",
        examples: [
            .init("Check the session daemon", "propctl status"),
            .init("Check the system daemon", "propctl --system status"),
        ]
    )
}
