import CommandLineKit
import DBus
import Glibc
import PropBus
import SystemKit

/// `propctl bind KEY <endpoint> [--map EXPR] [--unmap EXPR] [--direction both|from|to]`: a
/// client-side channel (``ClientChannel``) to a file, a coprocess or stdin/stdout, or with
/// `--to` a daemon-side binding (`Manager.Bind`).
enum BindVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let key = try PropbusClient.key(parsed.positional("KEY") ?? "")
        let direction = try ChannelDirection(option: parsed.option("direction"))
        let arguments = parsed.positionals("ARG")
        if !arguments.isEmpty, parsed.option("exec") == nil {
            throw CommandFailure(.usage, "extra arguments \(arguments.joined(separator: " ")) are only accepted with --exec")
        }
        if parsed.flag("in-place"), parsed.option("file") == nil {
            throw CommandFailure(.usage, "--in-place is only meaningful with --file")
        }
        if parsed.flag("persist"), parsed.option("to") == nil {
            throw CommandFailure(.usage, "--persist is only meaningful with --to")
        }
        if let target = parsed.option("to") {
            try await bindInDaemon(key, to: try PropbusClient.key(target), direction: direction, parsed)
            return
        }
        let framing: LineEndpoint.Framing
        switch parsed.option("framing") {
        case nil, "lines": framing = .lines
        case "json": framing = .json
        case let other?: throw CommandFailure(.usage, "--framing expects lines or json, got '\(other)'")
        }
        if parsed.option("framing") != nil, parsed.option("exec") == nil, !parsed.flag("stdio") {
            throw CommandFailure(.usage, "--framing is only meaningful with --exec or --stdio")
        }
        var maximumLineLength = LineEndpoint.defaultMaximumLineLength
        if let text = parsed.option("max-line") {
            guard parsed.option("exec") != nil || parsed.flag("stdio") else {
                throw CommandFailure(.usage, "--max-line is only meaningful with --exec or --stdio")
            }
            guard let bytes = Int(text), bytes > 0 else {
                throw CommandFailure(.usage, "--max-line expects a positive number of bytes, got '\(text)'")
            }
            maximumLineLength = bytes
        }
        let transforms = try ChannelTransforms(map: parsed.option("map"), unmap: parsed.option("unmap"))
        let endpoint: LocalEndpoint
        let stdio = parsed.flag("stdio")
        if let path = parsed.option("file") {
            guard !path.isEmpty else { throw CommandFailure(.usage, "--file needs a path") }
            endpoint = FileEndpoint(path: path, inPlace: parsed.flag("in-place"))
        } else if let command = parsed.option("exec") {
            let argv = arguments.isEmpty ? ["/bin/sh", "-c", command] : [command] + arguments
            // A coprocess that exits must not kill propctl through a write to its closed stdin.
            signal(SIGPIPE, SIG_IGN)
            endpoint = try LineEndpoint.coprocess(argv, reads: direction.towardsBus, framing: framing, maximumLineLength: maximumLineLength)
        } else if stdio {
            signal(SIGPIPE, SIG_IGN)
            endpoint = LineEndpoint.standardStreams(reads: direction.towardsBus, framing: framing, maximumLineLength: maximumLineLength)
        } else {
            throw CommandFailure(.usage, "bind needs one of --file PATH, --exec CMD, --stdio or --to KEY2")
        }
        let client: PropbusClient
        do {
            client = try await PropbusClient.connect(parsed)
        } catch {
            endpoint.stop()
            throw error
        }
        // stdout carries the --stdio protocol; change events then go to stderr.
        let events = parsed.flag("json") ? (stdio ? FileDescriptor.standardError : FileDescriptor.standardOutput) : nil
        try await ClientChannel.run(ClientChannel(connection: client.connection, key: key, endpoint: endpoint, transforms: transforms,
                                                  direction: direction, events: events, verbose: parsed.flag("verbose")))
    }

    /// `--to KEY2`: `Manager.Bind(KEY, KEY2, options)`. Without `--persist` the binding lives as
    /// long as this connection, so propctl stays until interrupted.
    private static func bindInDaemon(_ key: Key, to target: Key, direction: ChannelDirection, _ parsed: ParsedCommand) async throws(CommandFailure) {
        var options = BindOptions(direction: Binding.Direction(rawValue: direction.rawValue) ?? .both, persistent: parsed.flag("persist"))
        for option in ["map", "unmap"] {
            guard let text = parsed.option(option) else { continue }
            let expression: Expression
            do { expression = try Expression(parsing: text) } catch {
                throw CommandFailure(.usage, "invalid --\(option) expression: \(error.message)")
            }
            if option == "map" { options.toKey = expression } else { options.toTarget = expression }
        }
        let persistent = options.persistent
        let client = try await PropbusClient.connect(parsed)
        let reply = try await client.manager("Bind", [.string(key.text), .string(target.text), .vardict(options.dictionary)])
        guard case .objectPath(let path)? = reply.first else {
            throw CommandFailure(.dbusError, "propbusd answered Bind with \(reply)")
        }
        if parsed.flag("json") {
            Output.line(Output.json(.object([("path", .string(path)), ("key", .string(key.text)), ("to", .string(target.text)),
                                             ("persistent", .bool(persistent))])))
        } else {
            Output.line(path)
        }
        if persistent { return }
        await Interrupt.wait(client.connection)
    }
}
