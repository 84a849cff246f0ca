import CommandLineKit

/// propbusd(8), generated from ``DaemonOptions/spec`` with propctl(1)'s option items: the page
/// lists exactly the options the parser accepts, and a new option appears in it without anyone
/// editing the page.
enum DaemonManPage {
    static func render(version: String) -> String {
        let escape = ManPage.escape
        var lines = [
            ".TH PROPBUSD 8 \"\" \"propbusd \(version)\" \"System Administration\"",
            ".SH NAME", "propbusd \\- serve typed, observable properties and commands on D\\-Bus",
            ".SH SYNOPSIS", ".B propbusd", "[\\fB\\-\\-session\\fR | \\fB\\-\\-system\\fR | \\fB\\-\\-address\\fR \\fIADDR\\fR] [\\fIOPTIONS\\fR]",
            ".SH DESCRIPTION",
            "propbusd owns \\fBorg.propbus.PropBus1\\fR and exports each group of keys as an object whose properties are the keys,",
            "with PropertiesChanged, change\\-only writes, bindings between keys and commands. It is usually started by systemd",
            "(\\fBpropbusd.service\\fR on the system bus, the user unit on the session bus) or by D\\-Bus activation;",
            "\\fBpropctl\\fR(1) is its command\\-line client.",
            ".SH OPTIONS",
        ]
        // The same items as propctl(1)'s options, from the spec the parser reads.
        lines += DaemonOptions.spec.options.flatMap(ManPage.option)
        // The prose of --help: the store, access control, signals.
        lines.append(".SH NOTES")
        for paragraph in DaemonOptions.notes.split(separator: "\n", omittingEmptySubsequences: true) {
            lines += [".PP", escape(String(paragraph))]
        }
        lines += [
            ".SH FILES",
            ".TP", "\\fI$XDG_STATE_HOME/propbus/propbus.db\\fR, \\fI/var/lib/propbus/propbus.db\\fR", "The store (session and system bus).",
            ".TP", "\\fIpropbusd.lock\\fR beside the store", "Names the holder of the state directory's lock (a flock on the directory itself, which removing this file does not release): one propbusd per store. Made by root, it is given to the directory's owner; one this user may not open is replaced once the directory is locked.",
            ".TP", "\\fI/etc/propbus/mandatory.d/50-propctl.json\\fR", "The locks of propctl lock (Manager.Lock, Manager.Unlock), written by propbusd itself: a new file synced and renamed over the old, under a flock of the directory.",
            ".TP", "\\fI$XDG_CONFIG_HOME/propbus/models/*.json\\fR, \\fI/etc/propbus/models/*.json\\fR", "Model files read at start and again on SIGHUP (systemctl reload, propctl reload).",
            ".SH \"EXIT STATUS\"",
            "0 after SIGTERM or SIGINT; 1 on a start\\-up failure or when the bus goes away (running executions are killed first); 64 for a wrong command line.",
            ".SH \"SEE ALSO\"", "\\fBpropctl\\fR(1), \\fBbusctl\\fR(1), \\fBsystemd.service\\fR(5), \\fBdbus\\-daemon\\fR(1)",
        ]
        return lines.joined(separator: "\n") + "\n"
    }
}
