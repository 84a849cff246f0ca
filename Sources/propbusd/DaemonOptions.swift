import DBus
import PropBus
import PropBusService

/// propbusd's command line, declared once: parsing and `--help` both come from `table`.
struct DaemonOptions {
    var bus: BusAddress = .session
    var limits = PropertyModel.Limits()
    /// `--state-dir`; `$STATE_DIRECTORY` still wins (see ``StateDirectory``).
    var stateDirectory: String?
    /// `--recover`: move a damaged store aside and start with an empty one.
    var recover = false
    /// `--in-memory`: keep nothing on disk.
    var inMemory = false
    var service = Service.Options()
    /// Model files given with `--model`, read after those of the config directory.
    var models: [String] = []
    /// `--max-executions`: command executions running at once, across all commands.
    var maximumExecutions = 64
    /// `--system-access`: check callers as on the system bus, whatever the bus (SPEC §7).
    var systemAccess = false
    /// `--strict-models`: a bad model file stops the start instead of being skipped.
    var strictModels = false

    /// Whether callers are checked (SPEC §7): on the system bus, or with `--system-access`.
    var enforcesAccess: Bool {
        if case .system = bus { return true }
        return systemAccess
    }

    struct UsageError: Error { var message: String }

    struct Option: Sendable {
        var name: String
        var value: String?
        var help: String
        var apply: @Sendable (inout DaemonOptions, String) throws(UsageError) -> Void
    }

    static let table: [Option] = [
        Option(name: "--session", help: "Use the session bus (the default).") { o, _ in o.bus = .session },
        Option(name: "--system", help: "Use the system bus.") { o, _ in o.bus = .system },
        Option(name: "--address", value: "ADDR", help: "Use the bus at this D-Bus address.") { o, v in o.bus = .address(v) },
        Option(name: "--system-access", help: "Check callers as on the system bus (root and group propbus write; see docs/security.md).") { o, _ in
            o.systemAccess = true
        },
        Option(name: "--max-value-size", value: "BYTES", help: "Refuse values larger than this (default 1048576).") { o, v throws(UsageError) in
            o.limits.maximumValueSize = try positive(v, "--max-value-size")
        },
        Option(name: "--max-message-size", value: "BYTES", help: "Never send a message larger than this; set it to the bus's max_message_size (default 33554432, the system bus's; at most 134217728).") { o, v throws(UsageError) in
            let size = try positive(v, "--max-message-size")
            guard size >= 65536, size <= 128 << 20 else {
                throw UsageError(message: "--max-message-size expects 65536 to 134217728 bytes (the protocol's limit), got \(size)")
            }
            o.limits.maximumMessageSize = size
        },
        Option(name: "--max-properties", value: "N", help: "Refuse to hold more than N properties (default 100000).") { o, v throws(UsageError) in
            o.limits.maximumProperties = try positive(v, "--max-properties")
        },
        Option(name: "--max-bindings-per-client", value: "N", help: "Refuse more than N bindings from one connection (default 64).") { o, v throws(UsageError) in
            o.service.maximumBindingsPerClient = try positive(v, "--max-bindings-per-client")
        },
        Option(name: "--max-executions", value: "N", help: "Refuse more than N command executions running at once (default 64).") { o, v throws(UsageError) in
            o.maximumExecutions = try positive(v, "--max-executions")
        },
        Option(name: "--model", value: "FILE", help: "Also read this model file (repeatable); the config directory's *.json come first.") { o, v in
            o.models.append(v)
        },
        Option(name: "--strict-models", help: "Refuse to start when a model file is bad (by default it is skipped and logged).") { o, _ in
            o.strictModels = true
        },
        Option(name: "--state-dir", value: "DIR", help: "Keep the store in DIR (unless $STATE_DIRECTORY is set).") { o, v throws(UsageError) in
            guard !v.isEmpty else { throw UsageError(message: "--state-dir expects a directory") }
            o.stateDirectory = v
        },
        Option(name: "--recover", help: "If the store is damaged, move its files aside (kept) and start empty.") { o, _ in o.recover = true },
        Option(name: "--in-memory", help: "Keep nothing on disk: values last until the daemon exits.") { o, _ in o.inMemory = true },
    ]

    private static func positive(_ text: String, _ name: String) throws(UsageError) -> Int {
        guard let n = Int(text), n > 0 else { throw UsageError(message: "\(name) expects a positive integer, got '\(text)'") }
        return n
    }

    /// The result of parsing: options to run with, or a request for help or the version.
    enum Parsed { case run(DaemonOptions), help, version }

    static func parse(_ arguments: [String]) throws(UsageError) -> Parsed {
        var options = DaemonOptions()
        var index = 0
        while index < arguments.count {
            var argument = arguments[index]
            var inlineValue: String?
            if let equals = argument.firstIndex(of: "="), argument.hasPrefix("--") {
                inlineValue = String(argument[argument.index(after: equals)...])
                argument = String(argument[..<equals])
            }
            switch argument {
            case "--help", "-h": return .help
            case "--version": return .version
            default: break
            }
            guard let option = table.first(where: { $0.name == argument }) else {
                throw UsageError(message: "unknown option '\(argument)'")
            }
            var value = ""
            if option.value != nil {
                if let inlineValue {
                    value = inlineValue
                } else {
                    index += 1
                    guard index < arguments.count else { throw UsageError(message: "\(argument) expects a value \(option.value!)") }
                    value = arguments[index]
                }
            } else if inlineValue != nil {
                throw UsageError(message: "\(argument) takes no value")
            }
            try option.apply(&options, value)
            index += 1
        }
        return .run(options)
    }

    static var help: String {
        let rows = table.map { ($0.name + ($0.value.map { " " + $0 } ?? ""), $0.help) } + [("--version", "Print the version."), ("-h, --help", "Show this help.")]
        let width = rows.map(\.0.count).max() ?? 0
        return """
        USAGE: propbusd [--session | --system | --address ADDR] [OPTIONS]

        Serves typed, observable properties on D-Bus as org.propbus.PropBus1.

        OPTIONS:
        \(rows.map { "  " + $0.0 + String(repeating: " ", count: width - $0.0.count) + "  " + $0.1 }.joined(separator: "\n"))

        The store is DIR/propbus.db, DIR being $STATE_DIRECTORY, else --state-dir, else
        $XDG_STATE_HOME/propbus (session bus, default ~/.local/state/propbus) or /var/lib/propbus
        (system bus). A damaged store makes propbusd exit 1 naming the file, unless --recover.

        On the system bus, or with --system-access, callers are checked: root, propbusd's own user
        and members of group propbus may write; a property's writers option replaces that set, and
        secret properties are readable by their writers only. On the session bus all is allowed.

        Model files are read at start and again on SIGHUP or Manager.Reload (propctl reload):
        new keys appear, changed ones apply, keys a file no longer declares leave the bus while
        their stored values stay (propctl prune deletes them). A bad file is skipped and logged.
        Only one propbusd may use a state directory at a time (a lock file, propbusd.lock).

        On SIGTERM or SIGINT it stops accepting calls, cancels running executions, commits,
        releases its name and exits 0; if it loses the bus it exits 1. Under systemd
        (Type=notify) it sends READY=1 once the name is owned, STOPPING=1 on SIGTERM, and
        watchdog pings when WatchdogSec= is set; RELOADING=1 and READY=1 around a reload.
        """
    }
}
