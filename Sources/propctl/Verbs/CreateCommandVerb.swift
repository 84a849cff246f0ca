import CommandLineKit
import DBus
import PropBus

/// `propctl create-command KEY [options] -- PROGRAM [ARG...]`: `Manager.CreateCommand`.
enum CreateCommandVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let key = try PropbusClient.key(parsed.positional("KEY") ?? "")
        let argv = [parsed.positional("PROGRAM")].compactMap { $0 } + parsed.positionals("ARG")
        var options: [String: DBusValue] = [:]
        switch (parsed.flag("handler"), argv.isEmpty) {
        case (true, false): throw CommandFailure(.usage, "give either --handler or a PROGRAM, not both")
        case (false, true): throw CommandFailure(.usage, "missing PROGRAM (after --), or --handler for a command served by a client")
        case (true, true): options["handler"] = .boolean(true)
        case (false, false): options["exec"] = .array(of: .string, argv.map { .string($0) })
        }
        if parsed.flag("concurrent") { options["concurrent"] = .boolean(true) }
        if parsed.flag("transient") { options["persistent"] = .boolean(false) }
        if let expression = parsed.option("enabled-when") { options["enabled_when"] = .string(expression) }
        if let description = parsed.option("description") { options["description"] = .string(description) }
        if let text = parsed.option("timeout") {
            guard let seconds = Double(text), seconds > 0, seconds.isFinite else {
                throw CommandFailure.badValue("--timeout must be a positive number of seconds, got '\(text)'")
            }
            options["timeout"] = .double(seconds)
        }
        let writers = parsed.options("writers").flatMap { $0.split(separator: ",").map { String($0).trimmed } }.filter { !$0.isEmpty }
        if !writers.isEmpty { options["writers"] = .array(of: .string, writers.map { .string($0) }) }
        let client = try await PropbusClient.connect(parsed)
        _ = try await client.manager("CreateCommand", [.string(key.text), .vardict(options)])
        if parsed.flag("json") {
            Output.line(Output.json(.object([("key", .string(key.text)),
                                             ("exec", .array(argv.map { .string($0) })), ("handler", .bool(parsed.flag("handler")))])))
        }
    }
}

extension String {
    /// Without leading and trailing spaces.
    var trimmed: String {
        String(drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
    }
}
