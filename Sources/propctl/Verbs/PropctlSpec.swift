import CommandLineKit
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
            """,
        options: [
            .flag("system", help: "Use the system bus."),
            .flag("user", help: "Use the session bus (the default)."),
            .value("address", valueName: "ADDR", help: "Use the bus at ADDR, e.g. unix:path=/run/bus."),
            .flag("json", help: "Print machine-readable JSON."),
            .help,
            .version,
        ],
        subcommands: [get, set, reset, list, watch, describe, create, delete, override, bind, bindings, unbind, history, blame, revert,
                      exec, serve, cancel, createCommand, deleteCommand, dump, load, SettingsSpecs.importSettings, SettingsSpecs.exportSettings, status, reload, lock, unlock, prune, codegen, completion],
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
                        "read": "get", "write": "set", "get-property": "get", "set-property": "set", "introspect": "describe"],
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
                  "Layer files: locked values, site and vendor defaults (propbusd --config-dir, --vendor-dir; docs/layers.md). propctl lock writes mandatory.d/50-propctl.json."),
            .init("/usr/share/bash-completion/completions/propctl", "The bash completion (propctl completion bash); zsh's is /usr/share/zsh/vendor-completions/_propctl, fish's /usr/share/fish/vendor_completions.d/propctl.fish."),
        ]
    )

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
            .value("writers", valueName: "LIST", help: "Who may write it with access control on: user names, @groups and uids, comma-separated (repeatable; '' for root and the daemon only).", repeatable: true),
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
            exits with its status. Without CMD, propctl prints the override's handle and holds \
            it until SIGINT or SIGTERM (or --for ends, then exits 0). If propctl dies, the \
            override ends with its connection; with --for it ends when the duration does, kept \
            across a restart of propbusd. Several overrides of a key stack: the latest shows, \
            and ending one falls back to the one before. Overriding needs the right to write \
            KEY and counts against the caller's 'overrides' quota.
            """,
        options: [
            .value("for", valueName: "DURATION", help: "End the override after DURATION (90, 30s, 5m, 2h, 1d), even if propctl is killed."),
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

    /// `propctl bind KEY <endpoint> [options]`
    static let bind = CommandSpec(
        name: "bind",
        abstract: "Bind a key two-way to a file, a coprocess, stdin/stdout or another key.",
        discussion: """
            The key on the bus leads: when the binding starts, the local side takes the key's \
            value and nothing is written to the bus. From then on a change on either side \
            reaches the other. A value is propagated only when it differs from the other \
            side's current value, so nothing echoes and no change is swallowed.

            Local values are text: a file's content without its trailing newline, or one line \
            of a coprocess or of stdin. Without --unmap the text is read like set's VALUE; \
            without --map the key's value is printed like get prints it.

            --map EXPR computes the local text from the key's value, --unmap EXPR the key's \
            value from the local text (a string, as 'value'). A string result of --unmap is \
            read by the key's type; any other result is converted to it.

            --direction from propagates key -> local only, to local -> key only (the local \
            value is sent at the start), both (the default) both ways.

            If propbusd restarts, the local side is resynchronized from the key, except that \
            a local change made while the daemon was away is sent to it once it is back.

            With --exec or --stdio each line is one value; --framing json makes each line a \
            JSON string instead ("line one\\nline two"), so values may hold newlines. The \
            binding ends when the coprocess or stdin ends. A line longer than --max-line \
            bytes (default 8388608, room for any value propbusd takes by default, even as \
            JSON) is dropped with an error on stderr; the next line is read as usual. With \
            --json each propagated change prints {"direction","key","value"}: "from" for \
            key -> local, "to" for local -> key (on stderr with --stdio).

            --to KEY2 asks propbusd for a daemon-side binding (Manager.Bind): KEY follows \
            KEY2, --map becomes to_key and --unmap to_target. It prints the binding's path \
            and stays until interrupted, since the binding ends with this connection; with \
            --persist the binding is stored and propctl exits at once.
            """,
        options: [
            .value("file", valueName: "PATH", help: "Bind the content of the file at PATH, watched with inotify.", completion: .file),
            .flag("in-place", help: "Write PATH in place, not by rename (sysfs-like files)."),
            .value("exec", valueName: "CMD", help: "Bind the lines of the coprocess /bin/sh -c CMD (with ARG...: CMD ARG... without a shell)."),
            .flag("stdio", help: "Bind lines read from stdin and written to stdout."),
            .value("framing", valueName: "FORMAT", help: "With --exec or --stdio: lines (the default) or json (one JSON string per line).",
                   completion: .choices(["lines", "json"])),
            .value("max-line", valueName: "BYTES", help: "With --exec or --stdio: the longest line read (default 8388608); a longer one is dropped with an error."),
            .value("to", valueName: "KEY2", help: "Make KEY follow KEY2 inside propbusd.", completion: .dynamic("key")),
            .flag("persist", help: "With --to: store the binding so that it survives restarts."),
            .value("map", valueName: "EXPR", help: "Compute the local value from the key's value."),
            .value("unmap", valueName: "EXPR", help: "Compute the key's value from the local value."),
            .value("direction", valueName: "DIR", help: "both (the default), from (key to local) or to (local to key).",
                   completion: .choices(["both", "from", "to"])),
            .flag("verbose", short: "v", help: "Say on stderr what happens to every change, also those not propagated and why."),
        ],
        positionals: [
            .init("KEY", help: "The key to bind, e.g. ui.switch.on.", completion: .dynamic("key")),
            .init("ARG", help: "With --exec, the coprocess's arguments (put -- before them).", optional: true, repeating: true),
        ],
        exclusiveOptions: [["file", "exec", "stdio", "to"]],
        examples: [
            .init("Mirror a key into a file, both ways", "propctl bind ui.switch.on --file /run/user/switch"),
            .init("Drive a sysfs file, which cannot be replaced", "propctl bind led.brightness --file /sys/class/leds/x/brightness --in-place"),
            .init("Show a boolean key as On/Off text", #"propctl bind ui.on --file f --map 'value ? "On" : "Off"' --unmap 'value=="On"'"#),
            .init("Only follow the key, never write it", "propctl bind ui.theme --file theme --direction from"),
            .init("Talk to a coprocess line by line", "propctl bind viewmodel.searchText --exec ./search-ui"),
            .init("Make one key follow another inside propbusd", "propctl bind ui.switch.on --to settings.someBoolKey --persist"),
        ]
    )

    /// `propctl bindings`
    static let bindings = CommandSpec(
        name: "bindings",
        abstract: "List the daemon-side bindings.",
        discussion: "One row per binding: its object path, the key, the key it follows and its options (state=suspended and a reason when its maker lost a right it needs). With PREFIX, only the bindings with a key starting with PREFIX at either end.",
        positionals: [.init("PREFIX", help: "List only bindings of keys starting with this, e.g. settings.", optional: true, completion: .dynamic("key"))],
        examples: [
            .init("List the bindings", "propctl bindings"),
            .init("List those of one group", "propctl bindings ui."),
            .init("List them as JSON", "propctl --json bindings"),
        ]
    )

    /// `propctl history [KEY|GROUP]`
    static let history = CommandSpec(
        name: "history",
        abstract: "Show who changed keys, when, and from what.",
        discussion: "One row per key per committed change: its revision, the time, the old and new value, how it was made (Set, Apply, Reset, a binding, a model file, …) and by whom (user, command, pid, bus name). Values of secret keys show as <redacted> to callers who may not read them. See docs/history.md.",
        options: [
            .value("since", valueName: "TIME", help: "Only changes at or after TIME: @REV, an RFC 3339 time (2026-12-01T10:00:00Z), a date (its midnight UTC) or a time ago (10m, 2h, 3d)."),
            .value("until", valueName: "TIME", help: "Only changes at or before TIME (the same forms as --since)."),
            .value("user", valueName: "USER", help: "Only changes made by USER (a name or a uid). After the subcommand, --user is this filter; the session bus is the default anyway."),
            .value("by", valueName: "USER", help: "The same as --user."),
            .value("format", valueName: "FORMAT", help: "table (the default), json, script (the propctl commands that redo the changes, shell-quoted) or profile (a document propctl load applies).",
                   completion: .choices(["table", "json", "script", "profile"])),
            .flag("denied", help: "List refused attempts instead (propbusd --history-denied; privileged callers only)."),
        ],
        positionals: [.init("KEY", help: "A key, or a group for every key under it; all keys when left out.", optional: true)],
        examples: [
            .init("Who changed the volume", "propctl history settings.volume"),
            .init("Every change of a group since revision 40, as JSON", "propctl --json history settings --since @40"),
            .init("What alice changed in the last two hours", "propctl history --since 2h --user alice"),
            .init("The propctl commands that redo today's changes", "propctl history settings --since 2026-12-01 --format script"),
            .init("Who was refused", "propctl history --denied"),
        ]
    )

    /// `propctl blame GROUP`
    static let blame = CommandSpec(
        name: "blame",
        abstract: "Show who last changed each key of a group.",
        discussion: "One row per key: its latest change in history (revision, time, old and new value, via, who). See docs/history.md.",
        positionals: [.init("KEY", help: "A group (or a key).")],
        examples: [.init("Who set what under settings", "propctl blame settings")]
    )

    /// `propctl revert`
    static let revert = CommandSpec(
        name: "revert",
        abstract: "Put keys back as they were, from history.",
        discussion: "With --to, each KEY (or every key of a GROUP) gets the value it had at that revision; with --change, the keys one change wrote get the values it replaced, only if they still hold what it wrote (else Conflict, naming who changed them since) unless --force. With --since (and --until), every change in that span is undone: each key changed in it (among the KEYs and GROUPs named; every key when none is) gets the value it had before the span's first change of it, only if it still holds what the span's last change wrote, unless --force; a key created or deleted in the span is a Conflict. Atomic: one Apply, one PropertiesChanged per object, recorded in history via Revert.",
        options: [
            .value("to", valueName: "TIME", help: "The revision (@REV) or time (as history --since reads it) whose values to restore."),
            .value("change", valueName: "REV", help: "The change to undo (its revision, as history shows it)."),
            .value("since", valueName: "TIME", help: "Undo every change from this revision (@REV) or time on (as history --since reads it)."),
            .value("until", valueName: "TIME", help: "With --since: up to this revision or time, included (default: now)."),
            .flag("force", help: "Undo even if the keys were changed since."),
        ],
        positionals: [.init("KEY", help: "A key, or a group for every key under it (with --to or --since).", optional: true, repeating: true)],
        exclusiveOptions: [["to", "change", "since"]],
        examples: [
            .init("Put the volume back as it was at revision 12", "propctl revert settings.volume --to @12"),
            .init("Undo change 40", "propctl revert --change 40"),
            .init("Undo what changed in the settings group in the last hour", "propctl revert settings --since 1h"),
        ]
    )

    /// `propctl unbind PATH`
    static let unbind = CommandSpec(
        name: "unbind",
        abstract: "Remove a daemon-side binding.",
        discussion: "PATH is the object path printed by bind --to and bindings, or just its number.",
        positionals: [.init("PATH", help: "The binding, e.g. /org/propbus/PropBus1/bindings/3 or 3.")],
        examples: [
            .init("Remove binding 3", "propctl unbind /org/propbus/PropBus1/bindings/3"),
            .init("The same, shorter", "propctl unbind 3"),
        ]
    )

    /// `propctl status`
    static let status = CommandSpec(
        name: "status",
        abstract: "Show whether propbusd is running, its version and its commands.",
        discussion: """
            The fleet row is FleetState (off, connecting, connected or unavailable) and the last \
            etcd revision the daemon applied (FleetRevision). With --fleet, also the hosts whose \
            propbusd is connected to the same etcd prefix (their presence keys, PREFIX/hosts/NAME); \
            when etcd cannot answer now, the status is still printed and one line on stderr says \
            that the host list cannot be read now (exit status 1), within about a second.
            """,
        options: [
            .flag("fleet", help: "Also list the hosts of the fleet that are up."),
        ],
        examples: [
            .init("Check the session daemon", "propctl status"),
            .init("Which hosts of the fleet are up", "propctl status --fleet"),
            .init("Check the system daemon", "propctl --system status"),
        ]
    )
}
