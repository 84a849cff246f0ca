import CommandLineKit

/// The administrator's subcommands: the daemon's status, model files, locks, unclaimed values, code.
enum AdministrationSpecs {
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

    /// `propctl reload`
    static let reload = CommandSpec(
        name: "reload",
        abstract: "Make propbusd read its model files again (like systemctl reload).",
        discussion: """
            Calls Manager.Reload, as SIGHUP does. New keys appear, changed definitions apply \
            (a stored value a definition no longer admits is kept, hidden), and keys a file no \
            longer declares leave the bus while their stored values stay. A file that cannot be \
            read or applied is skipped as a whole: reload prints it with file:line:column and \
            the reason, and exits 1; the other files are loaded all the same.
            """,
        examples: [
            .init("Apply an edited model file", "propctl reload"),
            .init("Reload the system daemon (as root or a member of group propbus)", "propctl --system reload"),
        ]
    )

    /// `propctl lock KEY|PREFIX VALUE [--for USER|@GROUP ...]`
    static let lock = CommandSpec(
        name: "lock",
        abstract: "Lock a key (or every key of GROUP.*) to a value, for everyone or --for some.",
        discussion: """
            Calls Manager.Lock: propbusd writes the entry into mandatory.d/50-propctl.json \
            under its --config-dir (durably: a new file synced and renamed over the old, under \
            a lock of the directory, so concurrent locks are all kept) and puts it in force at \
            once, without reading the other files again; history names the caller. The value \
            is checked first against the key (or every key of the group) and refused, as a \
            Set's would be, without writing anything. A locked key reads VALUE for everyone; \
            writes by those the lock refuses fail with org.propbus.PropBus1.Error.Locked naming \
            the file: everyone but root (and propbusd's own user on the system bus), or with \
            --for only the users and @groups named. Their own values are kept, hidden, and show \
            again on unlock. Only root (and propbusd's own user) may lock. Other daemons \
            reading the same directory (the session daemons) apply it at their next reload. \
            With --fleet, a fleet key (or \
            with GROUP.* every fleet key of the group, also those defined later) is locked on \
            every host of the fleet instead (in etcd, Manager.SetFleetLayer; root or \
            propbusd's user), and with --default --fleet it gets the fleet's default, below \
            the user's value.
            """,
        options: [.value("for", valueName: "USER|@GROUP", help: "Lock the key for this user or group only.", repeatable: true),
                  .flag("fleet", help: "Lock a fleet key on every host (etcd) instead of writing mandatory.d."),
                  .flag("default", help: "With --fleet: set the fleet's default of the key, not a lock.")],
        positionals: [.init("KEY", display: "KEY|PREFIX", help: "The key, or GROUP.* for every key of a group.", completion: .dynamic("key")),
                      .init("VALUE", help: "The value, read by the key's type.")],
        examples: [
            .init("Lock the volume at 20 for everyone", "propctl lock settings.volume 20"),
            .init("Only for the students", "propctl lock settings.volume 20 --for @students"),
            .init("Lock a fleet key on every host", "propctl lock kiosk.volume 20 --fleet"),
            .init("Give a fleet key the fleet's default", "propctl lock kiosk.volume 30 --default --fleet"),
        ]
    )

    /// `propctl unlock KEY|PREFIX`
    static let unlock = CommandSpec(
        name: "unlock",
        abstract: "Remove propctl's lock of a key (or GROUP.*).",
        discussion: """
            Calls Manager.Unlock: propbusd removes the entry from mandatory.d/50-propctl.json \
            (the file itself once it holds none) and puts that in force at once: the key shows \
            its user's value (or its defaults) again. Locks in other files are edited by hand \
            (then propctl reload). \
            With --fleet, removes the fleet's lock of a fleet key or GROUP.* (with --default, its fleet \
            default) on every host.
            """,
        options: [.flag("fleet", help: "Remove the fleet's lock of a fleet key (etcd)."),
                  .flag("default", help: "With --fleet: remove the fleet's default, not the lock.")],
        positionals: [.init("KEY", display: "KEY|PREFIX", help: "The key or GROUP.* given to propctl lock.", completion: .dynamic("key"))],
        examples: [.init("Unlock the volume", "propctl unlock settings.volume"),
                   .init("Unlock a fleet key on every host", "propctl unlock kiosk.volume --fleet")]
    )

    /// `propctl prune [--yes]`
    static let prune = CommandSpec(
        name: "prune",
        abstract: "Show, then with --yes delete, stored values that no definition claims.",
        discussion: """
            A key that leaves the bus because its model file no longer declares it keeps its \
            stored value, so that it returns if the key is declared again. prune lists those \
            values (KEY and VALUE, or JSON with --json); at a terminal it then asks before \
            deleting them, elsewhere it changes nothing. With --yes it deletes exactly the \
            values it lists, without asking. Hidden values of existing keys are not touched: \
            delete the key to drop one.
            """,
        options: [
            .flag("yes", help: "Delete the listed values (without it, prune only shows them)."),
        ],
        examples: [
            .init("See what would be deleted", "propctl prune"),
            .init("Delete it", "propctl prune --yes"),
        ]
    )

    /// `propctl codegen swift MODEL.json`
    static let codegen = CommandSpec(
        name: "codegen",
        abstract: "Print typed accessors for a model file's keys and commands (Swift).",
        discussion: """
            Reads MODEL (a model file, as propbusd loads them) and prints a Swift file for the \
            PropBusClient library: a struct named after the file (flickr-search.json gives \
            FlickrSearchKeys) with one struct per group, a typed Property per key and a Command \
            per command, documented with the description, the default, the range or choices. \
            A key whose type has no built-in Swift type is left as a comment. Only the file is \
            read; the bus is not used.
            """,
        positionals: [
            .init("LANGUAGE", help: "The language to generate: swift."),
            .init("FILE", display: "MODEL", help: "The model file (JSON)."),
        ],
        examples: [
            .init("Accessors for the Flickr search example", "propctl codegen swift examples/flickr-search.json"),
        ]
    )
}
