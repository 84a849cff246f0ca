import CommandLineKit
/// The declarations of `propctl import` and `export` (dconf's and GSettings' files,
/// docs/dconf.md), which ``PropctlSpec/root`` lists.
enum SettingsSpecs {
    /// `propctl import dconf|gschema|dconf-db [SOURCE]`
    static let importSettings = CommandSpec(
        name: "import",
        abstract: "Bring dconf's settings, GSettings schemas or dconf's system databases into propbus.",
        discussion: """
            dconf reads FILE (default -, standard input) as 'dconf dump' writes it and 'dconf \
            load' reads it: each value typed as its text says (GVariant text), each dconf path a \
            key (/org/gnome/desktop/interface/font-name is org.gnome.desktop.interface.font_name; \
            docs/dconf.md says how other characters are written). Keys propbusd lacks are created \
            with the value's type; then every value is set in one Manager.Apply: all of them or, \
            if one is refused, none (and the keys created for it are deleted again). A key \
            propbusd has with another type is refused before anything changes. With --path, \
            FILE's groups are relative to that directory, as with 'dconf load DIR'.

            gschema reads a .gschema.xml FILE, or every .gschema.xml, .enums.xml and \
            .gschema.override of a DIR (such as /usr/share/glib-2.0/schemas), and creates (or updates) a definition for \
            every key of every schema with a path: the type (an enum a string limited to its \
            nicks, flags an array of strings), the default, <range> as minimum and maximum, \
            <choices>, the summary as description. A key's stored value is kept. Relocatable \
            schemas have no path and are named on stderr; their keys are created by the first \
            write through the GSettings backend. The override files' values become the vendor \
            layer: VENDOR/defaults.d/50-gschema-overrides.json (--vendor-dir, by default \
            propbusd's /usr/share/propbus), then propbusd reloads.

            dconf-db reads DIR as dconf's /etc/dconf/db/NAME.d/: its key files become the site \
            layer, CONFIG/defaults.d/50-dconf-NAME.json, and the keys listed in its locks/ \
            directory are locked with mandatory entries, CONFIG/mandatory.d/50-dconf-NAME.json \
            (CONFIG is propbusd's --config-dir), with the database's value or, for a key it has \
            none of, the key's default. Keys propbusd lacks are created first; then propbusd \
            reloads. No 'dconf update' step: the files apply as written.

            With --dry-run nothing changes: every key that would be created or set, and every \
            file that would be written, is printed.
            """,
        options: [
            .flag("dry-run", help: "Print what would change; change nothing."),
            .value("path", valueName: "DIR", help: "dconf: the dconf directory FILE's groups are relative to (default /), as 'dconf load DIR'."),
            .value("vendor-dir", valueName: "DIR", help: "gschema: where override files' values go, DIR/defaults.d (default /usr/share/propbus).", completion: .file),
        ],
        positionals: [
            .init("FORMAT", help: "dconf, gschema or dconf-db.", completion: .choices(["dconf", "gschema", "dconf-db"])),
            .init("SOURCE", display: "FILE|DIR", help: "dconf: a dump (- for standard input); gschema: a .gschema.xml or a schema directory; dconf-db: a NAME.d directory.",
                  optional: true, completion: .file),
        ],
        examples: [
            .init("Move a user's settings (dconf dump / > settings.ini first)", "propctl import dconf settings.ini"),
            .init("See what a dump would change", "propctl import dconf --dry-run settings.ini"),
            .init("Load one directory's dump, as dconf load DIR does", "propctl import dconf --path /org/gnome/desktop/ desktop.ini"),
            .init("Definitions of every installed schema", "propctl import gschema /usr/share/glib-2.0/schemas"),
            .init("An administrator's defaults and locks", "propctl --system import dconf-db /etc/dconf/db/local.d"),
        ]
    )

    /// `propctl export dconf [DIR]`
    static let exportSettings = CommandSpec(
        name: "export",
        abstract: "Write keys in dconf's format, for 'dconf load'.",
        discussion: """
            Writes the values users set (not defaults) of the keys under DIR (default /), as \
            'dconf dump DIR' writes them: one [group] per dconf directory, relative to DIR, each \
            value as GVariant text with its type. 'dconf load DIR' reads it back. A key whose \
            name has no dconf path (docs/dconf.md) is left out and named on stderr.
            """,
        positionals: [
            .init("FORMAT", help: "dconf.", completion: .choices(["dconf"])),
            .init("DIR", help: "The dconf directory to export, e.g. /org/gnome/desktop/ (default /).", optional: true),
        ],
        examples: [
            .init("Everything, for dconf load / (or a diff with dconf dump /)", "propctl export dconf"),
            .init("One directory, for dconf load /org/gnome/desktop/", "propctl export dconf /org/gnome/desktop/"),
        ]
    )
}
