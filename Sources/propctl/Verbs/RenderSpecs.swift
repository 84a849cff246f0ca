import CommandLineKit

/// The renders' subcommand (docs/render.md).
enum RenderSpecs {
    /// `propctl render list|show|preview|run [NAME]`
    static let render = CommandSpec(
        name: "render",
        abstract: "List, describe, preview or run the files propbusd renders from keys.",
        discussion: """
            A render (declared under "renders" in a root-owned model file) writes a file from \
            a template and the keys it reads, checks it with its check program, puts it in \
            place atomically and reloads its service; render.NAME.State, .Message and \
            .Revision say how its last run went. list prints each render's name, state, \
            destination and revision; show prints one render's declaration and state; preview \
            prints exactly what it would write now, without writing (secret values show as \
            <secret> to those who may not read them); run renders now, without its wait, and \
            prints the outcome (as root or a member of group propbus). preview and run exit 1 \
            when nothing could be written (waiting-for-keys, check-failed, …).
            """,
        positionals: [
            .init("ACTION", display: "list|show|preview|run", help: "What to do.", completion: .choices(RenderVerb.actions)),
            .init("NAME", help: "The render, as its model file names it (show, preview, run).", optional: true,
                  completion: .dynamic("render")),
        ],
        examples: [
            .init("Every render and how its last run went", "propctl render list"),
            .init("What would be written to nginx.conf now", "propctl render preview nginx"),
            .init("Render and reload now, without the wait", "propctl render run nginx"),
            .init("One render's state and declaration, as JSON", "propctl --json render show nginx"),
        ]
    )
}
