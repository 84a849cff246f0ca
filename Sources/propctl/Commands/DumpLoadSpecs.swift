extension PropctlSpec {
    /// `propctl dump [PREFIX]`
    static let dump = CommandSpec(
        name: "dump",
        abstract: "Write keys, types and values as one JSON document.",
        discussion: """
            The document maps each key to its type, its value and whether a value is stored \
            (is_set); keys reading their default have "is_set": false. 'propctl load' reads it back.
            """,
        positionals: [.init("PREFIX", help: "Only keys starting with this, e.g. settings.", optional: true)],
        examples: [
            .init("Print every key under settings", "propctl dump settings"),
            .init("Dump everything on the system bus", "propctl --system dump"),
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
            "is_set": false are reset to their default.
            """,
        positionals: [.init("FILE", help: "The JSON document; - reads standard input.")],
        examples: [
            .init("Restore settings", "propctl load settings.json"),
            .init("Read the document from standard input", "propctl load -"),
        ]
    )
}
