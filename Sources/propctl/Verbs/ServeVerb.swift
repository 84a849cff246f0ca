import CommandLineKit
import DBus
import Glibc
import PropBus
import SystemKit

/// `propctl serve KEY -- CMD [ARG...]`: the handler of a `handler=true` command (``HandlerServer``).
enum ServeVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let key = try PropbusClient.key(parsed.positional("KEY") ?? "")
        guard let program = parsed.positional("CMD"), !program.isEmpty else {
            throw CommandFailure(.usage, "serve needs a program to run: propctl serve KEY -- CMD [ARG...]")
        }
        // A program that closes its stdin early must not kill propctl through the write.
        signal(SIGPIPE, SIG_IGN)
        let client = try await PropbusClient.connect(parsed)
        let server = LoopBound.handOver(HandlerServer(connection: client.connection, key: key, argv: [program] + parsed.positionals("ARG")),
                                        to: client.connection.queue)
        try await HandlerServer.start(server, for: key, on: client.connection)
        Output.error("propctl: serving \(key) with \(([program] + parsed.positionals("ARG")).joined(separator: " "))")
        await Interrupt.wait(client.connection)
        await HandlerServer.stop(server, on: client.connection)
    }
}
