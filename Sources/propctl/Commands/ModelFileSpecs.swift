import CommandLineKit
extension PropctlSpec {
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
}
