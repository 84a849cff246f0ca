import CommandLineKit

/// The subcommands that read, write and watch keys, and make and remove them.
enum KeySpecs {
    /// `propctl get KEY...`
    static let get = CommandSpec(
        name: "get",
        abstract: "Print the current value of one or more keys.",
        discussion: """
            Scalars print as plain text and containers as JSON, one line per key in the order \
            given. One key prints exactly; with several, control characters in values are \
            escaped (\\n, \\t, \\\\) so that each stays on its line. --json is always exact.
            """,
        positionals: [.init("KEY", help: "A key such as ui.switch.on.", repeating: true, completion: .dynamic("key"))],
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
            .init("KEY", help: "The key to change, e.g. ui.switch.on.", completion: .dynamic("key")),
            .init("VALUE", help: "The new value: plain text for a scalar, JSON for a container."),
        ],
        examples: [
            .init("Turn a switch on", "propctl set ui.switch.on true"),
            .init("Replace a list of strings", #"propctl set settings.tags '["a","b"]'"#),
            .init("Write a negative number", "propctl set settings.offset -5"),
        ]
    )

    /// `propctl reset [--recursive] KEY|PREFIX`
    static let reset = CommandSpec(
        name: "reset",
        abstract: "Forget the stored value of a key, so that it reads its default again.",
        discussion: """
            The default is not written: a later change of the registered default shows through. \
            With --recursive, every key of the group PREFIX and its subgroups is reset in one \
            Manager.Apply: all of them or, if one is refused, none.
            """,
        options: [.flag("recursive", short: "r", help: "Reset every key of a group and its subgroups.")],
        positionals: [.init("KEY", display: "KEY|PREFIX", help: "The key to reset, or with --recursive the group.", completion: .dynamic("key"))],
        examples: [
            .init("Go back to the default volume", "propctl reset settings.volume"),
            .init("Reset every setting", "propctl reset --recursive settings"),
        ]
    )

    /// `propctl list [PREFIX]`
    static let list = CommandSpec(
        name: "list",
        abstract: "List keys with their types and current values.",
        discussion: """
            Without PREFIX every key is listed; PREFIX selects a group and its subgroups (view \
            never selects viewmodel), or one key. A * in a fourth column marks a key whose value differs \
            from its default. On a terminal the output is an aligned table, otherwise \
            tab-separated; control characters in values are escaped (\\n, \\t, \\\\), never in --json.
            """,
        options: [
            .flag("groups", help: "Print only the groups holding the keys, one per line."),
            .flag("names", help: "Print only the keys' names, one per line."),
            .flag("changed", help: "Only keys whose value differs from their default (marked *)."),
            .flag("locked", help: "Only keys a mandatory layer file locks (see propctl lock)."),
        ],
        positionals: [.init("PREFIX", help: "List only this group and its subgroups, e.g. settings.", optional: true, completion: .dynamic("key"))],
        exclusiveOptions: [["groups", "names"]],
        examples: [
            .init("List everything", "propctl list"),
            .init("The groups, like gsettings list-schemas", "propctl list --groups"),
            .init("The keys of a group that were changed, names only", "propctl list --changed --names settings"),
            .init("List the settings group as JSON", "propctl --json list settings"),
        ]
    )

    /// `propctl watch [KEY|PREFIX...]`
    static let watch = CommandSpec(
        name: "watch",
        abstract: "Print every change to the watched keys until interrupted.",
        discussion: """
            First the current value of every watched key, then one line per change: the key \
            and its new value (control characters escaped, never in --json). Without arguments \
            every key is watched; a group name watches the group and its subgroups, as list does, \
            keys created later in new subgroups included. A deleted key prints KEY (deleted), \
            in --json {"key": KEY, "deleted": true}. \
            When propbusd restarts, every watched key is printed again; when the bus goes away, \
            watch exits with status 69.
            """,
        options: [
            .flag("timestamps", help: "Start each line with the time of the change."),
            .flag("origin", help: "End each change's line with who made it and how (via, user, command, pid, bus name, revision), from the daemon's history."),
        ],
        positionals: [
            .init("KEY", display: "KEY|PREFIX", help: "A key, or a group of keys, to watch.",
                  optional: true, repeating: true, completion: .dynamic("key")),
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
            .value("scope", valueName: "SCOPE", help: "local (the default) or fleet: shared by every host through etcd (propbusd --fleet).",
                   completion: .choices(["local", "fleet"])),
            .value("writers", valueName: "LIST", help: "Who may write it with access control on: user names, @groups and uids, comma-separated ('' for root and the daemon only).", repeatable: true),
            .flag("secret", help: "Readable only by its writers, with access control on; never sent in signals."),
            .value("lifetime", valueName: "SPAN", help: "Make an ephemeral key: 'connection' (deleted when this propctl ends; it holds the key until interrupted, or while CMD runs) or a DURATION (90, 30s, 5m, 2h, 1d; deleted when it ends, also across restarts). With --scope fleet, an etcd lease: the key goes on every host (a killed host's after about 5 s)."),
        ],
        positionals: [
            .init("KEY", help: "The key to create, e.g. settings.volume."),
            .init("TYPE", help: "A single complete D-Bus type, e.g. b, i, d, s, as or a{sv}."),
            .init("CMD", help: "With --lifetime connection: a program to run while the key exists (put -- before it).", optional: true),
            .init("ARG", help: "Its arguments.", optional: true, repeating: true),
        ],
        examples: [
            .init("A volume from 0 to 100", "propctl create settings.volume i --default 50 --minimum 0 --maximum 100"),
            .init("A search field that is not persisted", "propctl create viewmodel.searchText s --transient"),
            .init("A theme with fixed choices", "propctl create ui.theme s --default light --choice light --choice dark"),
            .init("A token only root and group vault may read or write", "propctl --system create vault.token s --writers root,@vault --secret"),
            .init("A key that exists while a job runs", "propctl create job.progress d --lifetime connection -- ./job.sh"),
            .init("A key that goes away in an hour", "propctl create session.banner s --default 'maintenance at 5' --lifetime 1h"),
        ]
    )

    /// `propctl override KEY VALUE [--for DURATION] [-- CMD [ARG...]]`
    static let override = CommandSpec(
        name: "override",
        abstract: "Hold a temporary value over a key while a command runs.",
        discussion: """
            Calls Manager.Override: KEY reads VALUE (read like set's) while propctl holds it, \
            then its own value again, which the override never writes; a Set meanwhile changes \
            that value, seen when the override ends. With CMD, propctl runs it (stdio passed \
            through, SIGINT and SIGTERM passed on), releases the override when it exits and \
            exits with its status. Without CMD, propctl prints the override's handle; then \
            without --for it holds the override until SIGINT or SIGTERM (if propctl dies, the \
            override ends with its connection), and with --for it exits at once: the daemon \
            ends the override when the duration does, also across a restart of propbusd \
            (Manager.ReleaseOverride with the handle ends it sooner). With CMD and --for, the \
            override ends at the first of the two. Several overrides of a key stack: the latest shows, \
            and ending one falls back to the one before. Overriding needs the right to write \
            KEY and counts against the caller's 'overrides' quota.
            """,
        options: [
            .value("for", valueName: "DURATION", help: "End the override after DURATION (90, 30s, 5m, 2h, 1d), even if propctl is killed; without CMD, propctl sets it and exits."),
        ],
        positionals: [
            .init("KEY", help: "The key to override.", completion: .dynamic("key")),
            .init("VALUE", help: "The value it reads meanwhile."),
            .init("CMD", help: "A program to run while the override holds (put -- before it).", optional: true),
            .init("ARG", help: "Its arguments.", optional: true, repeating: true),
        ],
        examples: [
            .init("No screen blanking while a video plays", "propctl override display.idleDelay 0 -- mpv film.mkv"),
            .init("Mute for ten minutes", "propctl override sound.muted true --for 10m"),
        ]
    )

    /// `propctl delete KEY`
    static let delete = CommandSpec(
        name: "delete",
        abstract: "Remove a key and its stored value.",
        positionals: [.init("KEY", help: "The key to remove.", completion: .dynamic("key"))],
        examples: [.init("Remove a key", "propctl delete settings.volume")]
    )
}
