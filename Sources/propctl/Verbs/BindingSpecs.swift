import CommandLineKit

/// The subcommands of bindings: to files, coprocesses and stdio from propctl, and daemon-side.
enum BindingSpecs {
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
}
