import CommandLineKit
import DBus
import PropBus
import Glibc

/// `propctl create KEY TYPE [...]`: `Manager.CreateProperty` with options from flags.
enum CreateVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let key = try PropbusClient.key(parsed.positional("KEY") ?? "")
        let typeText = parsed.positional("TYPE") ?? ""
        let type: DBusType
        do { type = try DBusType(parsing: typeText) } catch {
            throw CommandFailure(.usage, "TYPE must be one complete D-Bus type such as b, i, s, as or a{sv}: \(error)")
        }
        func read(_ option: String) throws(CommandFailure) -> DBusValue? {
            guard let text = parsed.option(option) else { return nil }
            do { return try ValueText.parse(text, as: type) } catch {
                throw CommandFailure.badValue("invalid --\(option) for \(key) (type '\(typeText)'): \(error)")
            }
        }
        var options: [String: DBusValue] = [:]
        if parsed.flag("transient") { options["persistent"] = .boolean(false) }
        if parsed.flag("read-only") { options["writable"] = .boolean(false) }
        if let description = parsed.option("description") { options["description"] = .string(description) }
        if let minimum = try read("minimum") { options["minimum"] = minimum }
        if let maximum = try read("maximum") { options["maximum"] = maximum }
        if let initial = try read("value") { options["value"] = initial }
        if let scope = parsed.option("scope") {
            guard PropertyScope(rawValue: scope) != nil else {
                throw CommandFailure(.usage, "--scope expects local or fleet, got '\(scope)'")
            }
            options["scope"] = .string(scope)
        }
        let writerLists = parsed.options("writers")
        if !writerLists.isEmpty {
            let writers = writerLists.flatMap { $0.split(separator: ",", omittingEmptySubsequences: true) }
            options["writers"] = .array(of: .string, writers.map { .string(String($0)) })
        }
        if parsed.flag("secret") { options["secret"] = .boolean(true) }
        let choiceTexts = parsed.options("choice")
        if !choiceTexts.isEmpty {
            var choices: [DBusValue] = []
            for text in choiceTexts {
                do { choices.append(.variant(try ValueText.parse(text, as: type))) } catch {
                    throw CommandFailure.badValue("invalid --choice for \(key) (type '\(typeText)'): \(error)")
                }
            }
            options["choices"] = .array(of: .variant, choices)
        }
        let command = parsed.positional("CMD").map { [$0] + parsed.positionals("ARG") } ?? []
        let lifetime = parsed.option("lifetime")
        switch lifetime {
        case "connection"?: options["lifetime"] = .string("connection")
        case let text?: options["lifetime"] = .double(try LeaseHolding.seconds(text, option: "--lifetime"))
        case nil: break
        }
        if !command.isEmpty, lifetime != "connection" {
            throw CommandFailure(.usage, "a command (CMD) is only run with --lifetime connection: the key exists while it runs")
        }
        let defaultValue = try read("default") ?? type.zeroValue
        let client = try await PropbusClient.connect(parsed)
        _ = try await client.manager("CreateProperty", [.string(key.text), .string(type.signature), .variant(defaultValue),
                                                        .vardict(options)])
        if parsed.flag("json") {
            Output.line(Output.json(.object([("key", .string(key.text)), ("type", .string(type.signature)),
                                             ("default", ValueText.jsonValue(defaultValue))])))
        }
        // The key lives as long as this connection: held while CMD runs, or until interrupted.
        guard lifetime == "connection" else { return }
        if case .commandExited(let status) = try await LeaseHolding.hold(client.connection, running: command, for: nil), status != 0 {
            // The command's own status, which no CommandFailure code says.
            exit(status)
        }
    }
}
