import CommandLineKit
import DBus
import PropBus
import PropBusFleet
import PropBusModelFiles
import PropBusSystem
import PropBusService

/// propbusd's command line, declared once as a `CommandSpec` (from `table`): the shared parser
/// reads it, and `--help` and propbusd(8) are generated from it, as propctl's are.
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
    /// Change history (`--no-history`, `--history-max-rows`, `--history-max-age`).
    var history = HistoryOptions()
    /// Model files given with `--model`, read after those of the config directory.
    var models: [String] = []
    /// `--max-executions`: command executions running at once, across all commands.
    var maximumExecutions = 64
    /// `--quota NAME=N`: per-uid quotas other than the defaults (with access control only).
    var quotas: [Quota: UInt64] = [:]
    /// `--system-access`: check callers as on the system bus, whatever the bus (docs/security.md).
    var systemAccess = false
    /// `--strict-models`: a bad model file stops the start instead of being skipped.
    var strictModels = false
    /// `--max-model-file-size`: a larger model file is skipped unread.
    var maximumModelFileSize = ModelFile.defaultMaximumSize
    /// `--config-dir`: the administrator's layer files (`mandatory.d/`, `defaults.d/`).
    var configDirectory = LayerFiles.defaultConfigDirectory
    /// `--vendor-dir`: the distribution's layer files (`defaults.d/`).
    var vendorDirectory = LayerFiles.defaultVendorDirectory
    /// `--fleet` (with `--fleet-ca`, `--fleet-cert`, `--fleet-key`, `--fleet-credentials`, `--fleet-host`): share fleet-scoped
    /// keys through etcd; `nil` without it, and nothing changes.
    var fleet: FleetConfiguration?
    private var fleetCA: String?
    private var fleetCert: String?
    private var fleetKey: String?
    private var fleetCredentials: String?
    private var fleetHost: String?

    /// Whether callers are checked (docs/security.md): on the system bus, or with `--system-access`.
    var enforcesAccess: Bool {
        if case .system = bus { return true }
        return systemAccess
    }

    /// One option: its declaration (for the parser, `--help` and propbusd(8)) and how its value
    /// lands in the options. A flag's `apply` gets an empty string.
    struct Option: Sendable {
        var spec: OptionSpec
        var apply: @Sendable (inout DaemonOptions, String) throws(UsageError) -> Void

        static func flag(_ long: String, help: String, apply: @escaping @Sendable (inout DaemonOptions) -> Void) -> Option {
            Option(spec: .flag(long, help: help)) { options, _ in apply(&options) }
        }

        static func value(
            _ long: String, _ valueName: String, help: String, repeatable: Bool = false,
            apply: @escaping @Sendable (inout DaemonOptions, String) throws(UsageError) -> Void
        ) -> Option {
            Option(spec: .value(long, valueName: valueName, help: help, repeatable: repeatable), apply: apply)
        }
    }

    static let table: [Option] = [
        .flag("session", help: "Use the session bus (the default).") { $0.bus = .session },
        .flag("system", help: "Use the system bus.") { $0.bus = .system },
        .value("address", "ADDR", help: "Use the bus at this D-Bus address.") { o, v in o.bus = .address(v) },
        .flag("system-access", help: "Check callers as on the system bus (root and group propbus write; see docs/security.md).") {
            $0.systemAccess = true
        },
        .value("max-value-size", "BYTES", help: "Refuse values larger than this (default 1048576).") { o, v throws(UsageError) in
            o.limits.maximumValueSize = try positive(v, "--max-value-size")
        },
        .value("max-message-size", "BYTES", help: "Never send a message larger than this; set it to the bus's max_message_size (default 33554432, the system bus's; at most 134217728).") { o, v throws(UsageError) in
            let size = try positive(v, "--max-message-size")
            guard size >= 65536, size <= 128 << 20 else {
                throw usage("--max-message-size expects 65536 to 134217728 bytes (the protocol's limit), got \(size)")
            }
            o.limits.maximumMessageSize = size
        },
        .value("max-properties", "N", help: "Refuse to hold more than N properties (default 100000).") { o, v throws(UsageError) in
            o.limits.maximumProperties = try positive(v, "--max-properties")
        },
        .value("max-bindings-per-client", "N", help: "Refuse more than N bindings from one connection (default 64).") { o, v throws(UsageError) in
            o.service.maximumBindingsPerClient = try positive(v, "--max-bindings-per-client")
        },
        .value("max-reply-bytes-per-uid", "BYTES",
               help: "Refuse replies past BYTES sent to one uid within 10 s, so a caller that never reads cannot stall the bus for everyone; root and the daemon's user are exempt (default 33554432).") { o, v throws(UsageError) in
            o.service.maximumReplyBytesPerUID = try positive(v, "--max-reply-bytes-per-uid")
        },
        .value("max-signalled-value-size", "BYTES", help: "Announce a changed value larger than BYTES (marshalled) by invalidation, its name in PropertiesChanged's invalidated_properties, so readers Get it, charged as a reply, instead of sending it to every subscriber (default 4096).") { o, v throws(UsageError) in
            o.service.maximumSignalledValueSize = try positive(v, "--max-signalled-value-size")
        },
        .value("max-bus-held-bytes", "BYTES", help: "Refuse large replies while the bus holds more than BYTES of propbusd's messages that their readers have not read (asked of dbus-daemon's Debug.Stats interface, where it answers); keep it well below the bus's max_incoming_bytes; 0: no bound (default 67108864).") { o, v throws(UsageError) in
            guard let bytes = Int(v), bytes >= 0 else { throw usage("--max-bus-held-bytes expects a number of bytes (0: no bound), got '\(v)'") }
            o.service.maximumBusHeldBytes = bytes == 0 ? nil : bytes
        },
        .flag("no-history", help: "Keep no change history (see docs/history.md); by default every committed change is recorded with its caller.") {
            $0.history.isEnabled = false
            $0.service.recordsCallers = false
        },
        .value("history-max-rows", "N", help: "Keep at most N rows of change history, pruning the oldest in small steps between rounds, never in a call's commit (default 1000000).") { o, v throws(UsageError) in
            o.history.maximumRows = try positive(v, "--history-max-rows")
        },
        .value("history-max-bytes", "BYTES", help: "Keep at most BYTES of change history on disk (each row counts its kept values and 64 bytes), pruning the oldest between rounds (default: a twentieth of the store's file system, 16 MiB to 1 GiB).") { o, v throws(UsageError) in
            o.history.maximumBytes = try positive(v, "--history-max-bytes")
        },
        .value("history-max-value-size", "BYTES", help: "Keep in history only the size and SHA-256 digest of a value larger than BYTES (stored): it cannot be reverted to, and its row stays small (default 65536).") { o, v throws(UsageError) in
            o.history.maximumValueSize = try positive(v, "--history-max-value-size")
        },
        .value("history-max-age", "SECONDS", help: "Prune change history older than SECONDS (default: kept until --history-max-rows).") { o, v throws(UsageError) in
            o.history.maximumAge = try positive(v, "--history-max-age")
        },
        .value("history-max-per-key", "N", help: "Keep at most the N latest changes of each key (default: no limit per key); the older ones are pruned between rounds like --history-max-rows.") { o, v throws(UsageError) in
            o.history.maximumPerKey = try positive(v, "--history-max-per-key")
        },
        .flag("history-denied", help: "Also record refused attempts (AccessDenied): who, when, which key and method, never the value; the last 10000, readable by privileged callers (propctl history --denied).") {
            $0.history.recordsDenied = true
        },
        .value("max-executions", "N", help: "Refuse more than N command executions running at once (default 64).") { o, v throws(UsageError) in
            o.maximumExecutions = try positive(v, "--max-executions")
        },
        .value("quota", "NAME=N", help: "Hold each uid other than root and propbusd's own to N of NAME (with --system or --system-access): " + Quota.allCases.map { "\($0.rawValue) (\($0.noun); default \($0.defaultLimit))" }.joined(separator: ", ") + ".", repeatable: true) { o, v throws(UsageError) in
            switch Quotas.parse(v) {
            case .success(let (quota, limit)): o.quotas[quota] = limit
            case .failure(let error): throw usage(error.message)
            }
        },
        .value("model", "FILE", help: "Also read this model file; the config directory's *.json come first.", repeatable: true) { o, v in
            o.models.append(v)
        },
        .flag("strict-models", help: "Refuse to start when a model file is bad (by default it is skipped and logged).") {
            $0.strictModels = true
        },
        .value("max-model-file-size", "BYTES", help: "Skip, unread, a model file larger than this (default \(ModelFile.defaultMaximumSize)); only regular files are read.") { o, v throws(UsageError) in
            o.maximumModelFileSize = try positive(v, "--max-model-file-size")
        },
        .value("config-dir", "DIR", help: "Read the administrator's layer files from DIR/mandatory.d (locked values) and DIR/defaults.d (site defaults), at start and on each reload (default \(LayerFiles.defaultConfigDirectory); see docs/layers.md).") { o, v throws(UsageError) in
            guard !v.isEmpty else { throw usage("--config-dir expects a directory") }
            o.configDirectory = v
        },
        .value("vendor-dir", "DIR", help: "Read the distribution's default layer files from DIR/defaults.d (default \(LayerFiles.defaultVendorDirectory)).") { o, v throws(UsageError) in
            guard !v.isEmpty else { throw usage("--vendor-dir expects a directory") }
            o.vendorDirectory = v
        },
        .value("state-dir", "DIR", help: "Keep the store in DIR (unless $STATE_DIRECTORY is set).") { o, v throws(UsageError) in
            guard !v.isEmpty else { throw usage("--state-dir expects a directory") }
            o.stateDirectory = v
        },
        .flag("recover", help: "If the store is damaged, move its files aside (kept) and start empty.") { $0.recover = true },
        .flag("in-memory", help: "Keep nothing on disk: values last until the daemon exits.") { $0.inMemory = true },
        .value("fleet", "etcd://HOST:PORT[,HOST:PORT...]/PREFIX", help: "Share fleet-scoped keys (scope fleet) with every host using the same etcd cluster and PREFIX; etcds:// for TLS.") { o, v throws(UsageError) in
            do throws(FleetConfigurationError) { o.fleet = try FleetConfiguration.parse(v) } catch { throw usage(error.message) }
        },
        .value("fleet-ca", "FILE", help: "The CA certificate of the etcd members (https).") { o, v throws(UsageError) in
            guard !v.isEmpty else { throw usage("--fleet-ca expects a file") }
            o.fleetCA = v
        },
        .value("fleet-cert", "FILE", help: "This host's client certificate (PEM), for etcd members that require one (--client-cert-auth); with --fleet-key.") { o, v throws(UsageError) in
            guard !v.isEmpty else { throw usage("--fleet-cert expects a file") }
            o.fleetCert = v
        },
        .value("fleet-key", "FILE", help: "The private key (PEM) of --fleet-cert, in a file only root and propbus can read.") { o, v throws(UsageError) in
            guard !v.isEmpty else { throw usage("--fleet-key expects a file") }
            o.fleetKey = v
        },
        .value("fleet-credentials", "FILE", help: "etcd user and password, as USER:PASSWORD on the first line of a file only root and propbus can read.") { o, v throws(UsageError) in
            guard !v.isEmpty else { throw usage("--fleet-credentials expects a file") }
            o.fleetCredentials = v
        },
        .value("fleet-host", "NAME", help: "This host's name in the fleet (PREFIX/hosts/NAME; default: the host name).") { o, v throws(UsageError) in
            guard !v.isEmpty, !v.contains("/") else { throw usage("--fleet-host expects a name without '/', got '\(v)'") }
            o.fleetHost = v
        },
    ]

    /// The whole command line as the shared parser reads it; `--help` and propbusd(8) come from it.
    static let spec = CommandSpec(
        name: "propbusd",
        abstract: "Serves typed, observable properties on D-Bus as org.propbus.PropBus1.",
        discussion: notes,
        options: table.map(\.spec) + [.version, .help],
        // Which bus wins cannot depend on the order of the words.
        exclusiveOptions: [["session", "system", "address"]]
    )

    /// A wrong value, reported like the parser's own errors.
    private static func usage(_ message: String) -> UsageError {
        UsageError(message, commandPath: [])
    }

    private static func positive(_ text: String, _ name: String) throws(UsageError) -> Int {
        guard let n = Int(text), n > 0 else { throw usage("\(name) expects a positive integer, got '\(text)'") }
        return n
    }

    /// The result of parsing: options to run with, or a request for help or the version.
    enum Parsed { case run(DaemonOptions), help, version }

    /// Parses `arguments` (without the program name) with the shared parser, then applies each
    /// option in the table's order, checking its value.
    static func parse(_ arguments: [String]) throws(UsageError) -> Parsed {
        switch try CommandLineParser(root: spec).parse(arguments) {
        case .help: return .help
        case .version: return .version
        case .command(let parsed):
            var options = DaemonOptions()
            for option in table {
                if option.spec.takesValue {
                    for value in parsed.options(option.spec.long) { try option.apply(&options, value) }
                } else if parsed.flag(option.spec.long) {
                    try option.apply(&options, "")
                }
            }
            if options.fleet == nil, options.fleetCA != nil || options.fleetCert != nil || options.fleetKey != nil
                || options.fleetCredentials != nil || options.fleetHost != nil {
                throw usage("--fleet-ca, --fleet-cert, --fleet-key, --fleet-credentials and --fleet-host go with --fleet etcd://HOST:PORT/PREFIX")
            }
            if (options.fleetCert == nil) != (options.fleetKey == nil) {
                throw usage("--fleet-cert and --fleet-key go together: a client certificate and its private key")
            }
            options.fleet?.caFile = options.fleetCA
            options.fleet?.certFile = options.fleetCert
            options.fleet?.keyFile = options.fleetKey
            options.fleet?.credentialsFile = options.fleetCredentials
            if let host = options.fleetHost { options.fleet?.hostName = host }
            return .run(options)
        }
    }

    /// `--help`, generated from ``spec`` like propctl's.
    static var help: String { HelpGenerator(root: spec).help(for: []) }

    /// The discussion of `--help` (wrapped by the generator) and the NOTES of propbusd(8): one
    /// paragraph a line.
    static let notes = """
        The store is DIR/propbus.db, DIR being $STATE_DIRECTORY, else --state-dir, else $XDG_STATE_HOME/propbus (session bus, default ~/.local/state/propbus) or /var/lib/propbus (system bus). A damaged store makes propbusd exit 1 naming the file, unless --recover.

        On the system bus, or with --system-access, callers are checked: root, propbusd's own user and members of group propbus may write; a property's writers option replaces that set, and secret properties are readable by their writers only. On the session bus all is allowed.

        A binding acts with the rights of the uid that made it (its principal), checked each time it acts and at each start: one whose principal may no longer read or write a key it uses is suspended, logged and shown as such by Manager.ListBindings (state, reason), and resumes when the rights return. A command's enabled_when reads with its creator's rights in the same way.

        With access control on, what each uid holds is charged to it and held to a quota (--quota NAME=N; root and propbusd's own user have none): bindings (64, persistent ones included), running executions (16; the last eighth of --max-executions is kept for root), bytes of command input (16777216), properties created (1000), commands created (64) and bytes of values stored in the properties a uid created (16777216). Over one, LimitsExceeded names the uid and the quota; propctl status shows each uid's usage (Manager.GetUsage, ListUsage).

        Model files are read at start and again on SIGHUP or Manager.Reload (propctl reload): new keys appear, changed ones apply, keys a file no longer declares leave the bus while their stored values stay (propctl prune deletes them). A bad file is skipped and logged. Only one propbusd may use a state directory at a time (a flock on the directory; propbusd.lock names the holder).

        With --fleet, keys created with scope fleet are shared by every propbusd using the same etcd cluster and PREFIX (see docs/fleet.md): a write of one is sent to etcd as one transaction and answered once etcd accepted it; changes from other hosts arrive through a watch. Reads serve the local mirror, also while etcd is unreachable; writes of fleet keys then fail with Unavailable, and while FleetState is connecting (just started) they wait for the connection, up to 3 s. Manager.FleetState and FleetRevision tell the state (propctl status). When etcd goes back in time (restored from a backup, or recreated empty) the daemon logs a WARNING and reads etcd in full: etcd's state wins, and a fleet key etcd lacks keeps its definition (offered to etcd again) but loses its value. Members that require client certificates need --fleet-cert and --fleet-key.

        Layer files give keys values above and below the user's (see docs/layers.md): CONFIG/mandatory.d/*.json (--config-dir, default /etc/propbus) is the administrator's and locks the keys it names, for everyone but root (and, on the system bus, propbusd's own user) or only for the users and @groups of an entry's "for"; a locked write fails with org.propbus.PropBus1.Error.Locked naming the file. CONFIG/defaults.d/*.json are site defaults and VENDOR/defaults.d/*.json (--vendor-dir, default /usr/share/propbus) vendor defaults, both below the user's value. The session daemons read the same directories as the system daemon. Files apply in name order, a later one winning; a reload re-reads them at once, and a bad file or entry is logged, returned by Reload and listed by propctl status while the others apply.

        Every committed change is recorded in history in the same transaction as the value (docs/history.md): revision, time, old and new value, how (Set, Apply, binding from KEY, command state, model file, reload, fleet change from HOST, Revert) and who (uid, user, pid, comm, exe, systemd unit, bus name; a fleet key's value in etcd carries them to every host). propctl history, blame, revert and watch --origin read it; --history-max-rows, --history-max-age and --history-max-per-key bound it, --history-denied adds refused attempts (privileged callers only, never a value), --no-history turns it off.

        On SIGTERM or SIGINT it stops accepting calls, cancels running executions, commits, releases its name and exits 0 (one that comes while it is still starting is held until its handlers are in place, then does the same); if it loses the bus it exits 1. It starts its pieces in order (state directory lock, store, model files, signal handlers, bus connection, name, start-up commit, fleet, renders, serving) and stops them in reverse order, one log line each; a start that fails stops what has started and exits 1. Under systemd (Type=notify) it sends READY=1 once the name is owned, STOPPING=1 on SIGTERM, and watchdog pings when WatchdogSec= is set; RELOADING=1 and READY=1 around a reload.
        """
}
