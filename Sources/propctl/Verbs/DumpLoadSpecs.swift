import CommandLineKit

/// The subcommands that back up and restore keys.
enum DumpLoadSpecs {
    /// `propctl dump [PREFIX]`
    static let dump = CommandSpec(
        name: "dump",
        abstract: "Write keys, types and values as one JSON document.",
        discussion: """
            The document maps each key to its type, its value and whether a value is stored \
            (is_set); keys reading their default have "is_set": false. 'propctl load' reads it back. \
            With --definitions each key also gets its "definition" (default, range, choices, \
            description, persistent, writable, writers, secret), from which 'propctl load \
            --create' creates keys the daemon does not have, and the document also holds the \
            persistent bindings with an end among the keys dumped and the commands among them \
            (their CreateCommand options), which load --create makes again: a whole backup. \
            --format lines writes one JSON object per key and line, sorted by key, which diffs \
            well (then a line per binding and per command); load reads both formats.
            """,
        options: [
            .flag("definitions", help: "Include each key's definition, for load --create."),
            .value("format", valueName: "FORMAT", help: "json (one document, the default) or lines (one key per line).",
                   completion: .choices(["json", "lines"])),
        ],
        positionals: [.init("PREFIX", help: "Only this group and its subgroups, e.g. settings.", optional: true, completion: .dynamic("key"))],
        examples: [
            .init("Print every key under settings", "propctl dump settings"),
            .init("Dump everything on the system bus", "propctl --system dump"),
            .init("Keys with their definitions, one per line", "propctl dump --definitions --format lines settings"),
        ]
    )

    /// `propctl load FILE`
    static let load = CommandSpec(
        name: "load",
        abstract: "Apply a document written by 'propctl dump', atomically.",
        discussion: """
            Every value is read by its key's type and checked first; then the whole document is \
            applied in one Manager.Apply call, so if one value is refused nothing changes, and the \
            error names the key. Keys whose value is already the same are left alone; keys with \
            "is_set": false are reset to their default. With --create, keys missing from the \
            daemon are first created from their "definition" (dump --definitions), and so are \
            the document's commands the daemon lacks; if the values are then refused, those keys \
            and commands are deleted again. Then the document's persistent bindings are made \
            (binding the same keys the same way again returns the existing binding).
            """,
        options: [.flag("create", help: "Create missing keys from their definitions first.")],
        positionals: [.init("FILE", help: "The document (JSON or lines); - reads standard input.", completion: .file)],
        examples: [
            .init("Restore settings", "propctl load settings.json"),
            .init("Read the document from standard input", "propctl load -"),
            .init("Restore keys and their values on a fresh daemon", "propctl load --create keys.jsonl"),
        ]
    )
}
