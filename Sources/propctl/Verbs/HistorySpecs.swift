import CommandLineKit

/// The subcommands of history: who changed what, and undoing it.
enum HistorySpecs {
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
}
