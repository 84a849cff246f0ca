import Foundation

/// A desktop's settings as `dconf load` reads them: the defaults of every schema installed
/// (`gsettings list-recursively` with the memory backend: hundreds of keys of a stock GNOME
/// desktop), and a user's changes of every type GSettings apps store, maybe types, nested
/// variants, bytestrings and paths no key may hold among them.
enum DConfFixtures {
    /// A user's changes, by dconf directory.
    static let userChanges: [(directory: String, entries: [(String, String)])] = {
        var groups: [(String, [(String, String)])] = [
            ("org/gnome/desktop/interface", [("font-name", "'Cantarell 11'"), ("gtk-theme", "'Adwaita-dark'"), ("clock-format", "'24h'"),
                                             ("text-scaling-factor", "1.25"), ("cursor-size", "32"), ("enable-animations", "false"),
                                             ("color-scheme", "'prefer-dark'"), ("monospace-font-name", "'Source Code Pro 10'")]),
            ("org/gnome/desktop/input-sources", [("sources", "[('xkb', 'us'), ('xkb', 'de+nodeadkeys'), ('ibus', 'anthy')]"),
                                                 ("mru-sources", "@a(ss) []"), ("xkb-options", "['caps:escape', 'compose:ralt']")]),
            ("org/gnome/desktop/background", [("picture-uri", "'file:///home/alice/Pictures/it\\'s me.jpg'"), ("primary-color", "'#023c88'")]),
            ("org/gnome/shell", [("favorite-apps", "['org.gnome.Nautilus.desktop', 'firefox-esr.desktop', 'org.gnome.Terminal.desktop']"),
                                 ("enabled-extensions", "@as []"), ("welcome-dialog-last-shown-version", "'43.1'")]),
            ("org/gnome/shell/weather", [("locations", "[<(uint32 2, <('Berlin', 'EDDT', true, [(0.91746141594945008, 0.23241968454167572)], [(0.91658875132345297, 0.23387411976724018)])>)>]"),
                                         ("automatic-location", "true")]),
            ("org/gnome/clocks", [("world-clocks", "[{'location': <(uint32 2, <('Tokyo', 'RJTI', true, [(0.62191898430954862, 2.4408429589140699)], [(0.62282074357417661, 2.4391218722853854)])>)>}]")]),
            ("org/gnome/settings-daemon/plugins/xsettings", [("overrides", "{'Gtk/ShellShowsAppMenu': <0>, 'Gdk/WindowScalingFactor': <uint32 2>}")]),
            ("org/gnome/settings-daemon/plugins/power", [("sleep-inactive-ac-timeout", "uint32 3600"), ("idle-dim", "false"),
                                                         ("power-button-action", "'interactive'")]),
            ("org/gnome/nautilus/window-state", [("initial-size", "(1200, 800)"), ("maximized", "false")]),
            ("org/gtk/settings/file-chooser", [("window-position", "(26, 23)"), ("window-size", "(1231, 902)"), ("sort-column", "'name'"),
                                               ("show-hidden", "true"), ("last-folder-uri", "b'file:///tmp'")]),
            ("org/gnome/evince/default", [("window-ratio", "(0.5, 0.69999999999999996)"), ("zoom", "1.5e-2")]),
            ("com/example/Types", [("byte", "byte 0xff"), ("int16", "int16 -32768"), ("uint16", "uint16 65535"), ("int64", "int64 -9223372036854775808"),
                                   ("uint64", "uint64 18446744073709551615"), ("double", "-0.0"), ("huge", "1.7976931348623157e308"),
                                   ("object", "objectpath '/org/freedesktop/NetworkManager'"), ("signature", "signature 'a{sv}'"),
                                   ("bytes", "[byte 0x00, 0x01, 0xfe]"), ("bytestring", "b'\\001end'"), ("empty-bytes", "@ay []"),
                                   ("maybe-nothing", "@ms nothing"), ("maybe-just", "@ms 'here'"), ("maybe-maybe", "@mmi just nothing"),
                                   ("maybe-list", "@mai [1, 2]"), ("in-variant", "<@ms nothing>"), ("variant-variant", "<<(1, 'x')>>"),
                                   ("nested-dict", "{'a': {'b': <int64 1>}}"), ("unicode", "'\\u00e9t\\u00e9 \\U0001f600 \\t tab'"),
                                   ("empty-dict", "@a{sv} {}"), ("tuple-in-array", "[(1, 'one', true), (2, 'two', false)]"),
                                   ("dict-of-arrays", "{'x': [uint32 1, 2], 'y': @au []}")]),
            ("org/gnome/terminal/legacy/profiles:", [("default", "'b1dcc9dd-5262-4d8d-a863-c897e6d979b9'"),
                                                     ("list", "['b1dcc9dd-5262-4d8d-a863-c897e6d979b9', 'ca4b733c-53f2-4a7e-8a47-dce8de182546']")]),
        ]
        for uuid in ["b1dcc9dd-5262-4d8d-a863-c897e6d979b9", "ca4b733c-53f2-4a7e-8a47-dce8de182546"] {
            groups.append(("org/gnome/terminal/legacy/profiles:/:\(uuid)", [
                ("visible-name", "'Profile \(uuid.prefix(4))'"), ("use-system-font", "false"), ("font", "'Monospace 12'"),
                ("palette", "['#171421', '#c01c28', '#26a269', '#a2734c', '#12488b', '#a347ba', '#2aa1b3', '#d0cfcc']"),
                ("scrollback-lines", "100000"), ("background-transparency-percent", "12"), ("use-theme-colors", "false"),
            ]))
        }
        var keybindings: [(String, String)] = []
        for n in 1...12 {
            keybindings.append(("switch-to-workspace-\(n)", "['<Super>\(n % 10)']"))
            keybindings.append(("move-to-workspace-\(n)", "['<Super><Shift>\(n % 10)']"))
        }
        groups.append(("org/gnome/desktop/wm/keybindings", keybindings))
        var custom: [String] = []
        for n in 0..<8 {
            let path = "/org/gnome/settings-daemon/plugins/media-keys/custom-keybindings/custom\(n)/"
            custom.append("'\(path)'")
            groups.append((String(path.dropFirst().dropLast()), [("name", "'Launcher \(n)'"), ("command", "'app-\(n) --flag=\(n)'"),
                                                                 ("binding", "'<Super><Alt>\(n)'")]))
        }
        groups.append(("org/gnome/settings-daemon/plugins/media-keys", [("custom-keybindings", "[\(custom.joined(separator: ", "))]")]))
        for n in 0..<6 {
            groups.append(("org/gnome/desktop/app-folders/folders/Folder\(n)", [("name", "'Folder \(n)'"), ("translate", "false"),
                                                                                  ("apps", "['app\(n).desktop', 'other\(n).desktop']")]))
        }
        return groups
    }()

    /// The defaults of the installed schemas with a path, as dconf directories; empty when
    /// none are installed.
    static func installedSchemaDefaults() async throws -> [(directory: String, entries: [(String, String)])] {
        var environment = PrivateBus.isolatedEnvironment(address: nil)
        environment["GSETTINGS_BACKEND"] = "memory"
        environment["GSETTINGS_SCHEMA_DIR"] = nil
        let paths = try await runCommand("gsettings", ["list-schemas", "--print-paths"], environment: environment, timeout: 60)
        let values = try await runCommand("gsettings", ["list-recursively"], environment: environment, timeout: 60)
        guard paths.succeeded, values.succeeded else { throw TestSetupError("gsettings failed: \(paths) \(values)") }
        var pathOf: [String: String] = [:]
        for line in paths.stdout.split(separator: "\n") {
            let parts = line.split(separator: " ", maxSplits: 1)
            if parts.count == 2 { pathOf[String(parts[0])] = String(parts[1]) }
        }
        var groups: [String: [(String, String)]] = [:]
        for line in values.stdout.split(separator: "\n") {
            let parts = line.split(separator: " ", maxSplits: 2)
            guard parts.count == 3, let path = pathOf[String(parts[0])], path.count > 1 else { continue }
            groups[String(path.dropFirst().dropLast()), default: []].append((String(parts[1]), String(parts[2])))
        }
        return groups.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }

    /// `groups` as a key file for `dconf load /`.
    static func keyFile(_ groups: [(directory: String, entries: [(String, String)])]) -> String {
        groups.map { group in
            "[\(group.directory)]\n" + group.entries.map { "\($0.0)=\($0.1)\n" }.joined()
        }.joined(separator: "\n")
    }
}
