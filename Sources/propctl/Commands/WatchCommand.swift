import CommandLineKit
import DBus
import Glibc
import PropBus
import SystemKit

/// `propctl watch [KEY|PREFIX...]`: the current value of every watched key, then one line per
/// change until interrupted.
///
/// It subscribes before it reads: a read before the AddMatch would lose any change made
/// between the two. Keys and groups follow one rule (``KeyPrefix``). When propbusd restarts
/// (its name gets a new owner) every watched key is printed again, since values may have
/// changed while it was away; when the bus itself goes away, watch exits 69.
enum WatchCommand: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let patterns = parsed.positionals("KEY")
        for pattern in patterns where pattern.isEmpty || !pattern.utf8.allSatisfy({ ObjectPath.isElementByte($0) || $0 == UInt8(ascii: ".") }) {
            throw CommandFailure(.usage, "'\(pattern)' is neither a key nor a key prefix; \(Key.rule)")
        }
        let printer = WatchPrinter(patterns: patterns.map(KeyPrefix.init), json: parsed.flag("json"), timestamps: parsed.flag("timestamps"))
        let client = try await PropbusClient.connect(parsed)
        let connection = client.connection
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            connection.queue.async {
                connection.whenDisconnected {
                    Output.error("propctl watch: the bus went away")
                    exit(CommandFailure.ExitCode.unavailable.rawValue)
                }
                connection.addSignalHandler(matching: Self.changes) { printer.received($0) }
                connection.addSignalHandler(matching: Self.ownerChanges) { message in
                    guard let args = try? message.arguments(), args.count == 3 else { return }
                    if args[2].stringValue == "" {
                        Output.error("propctl watch: propbusd left the bus; waiting for it to come back")
                    } else {
                        Output.error("propctl watch: propbusd is back; current values follow")
                        Task { await printCurrent(client, printer) }
                    }
                }
                continuation.resume()
            }
        }
        do {
            try await connection.addMatch(Self.changes)
            try await connection.addMatch(Self.ownerChanges)
        } catch {
            throw CommandFailure(error)
        }
        let current = await printCurrent(client, printer)
        // A typo would otherwise wait in silence; a group that does not exist yet may be meant.
        for pattern in printer.patterns where !pattern.text.isEmpty && !current.contains(where: pattern.matches) {
            let hint = await client.nearestKeyOrGroup(to: pattern.text).map { "; did you mean '\($0)'?" } ?? ""
            Output.error("propctl watch: no key or group named \(pattern.text) yet; waiting for it to appear\(hint)")
        }
        while true { try? await Task.sleep(for: .seconds(3600)) }
    }

    /// Prints the current value of every watched key, then lets the changes through.
    /// Returns the keys printed.
    @discardableResult
    private static func printCurrent(_ client: PropbusClient, _ printer: WatchPrinter) async -> [String] {
        // Nothing to print while the daemon is away; its return prints them all.
        let items = ((try? await client.list(prefix: "")) ?? []).filter { printer.watches($0.key) }
        let current = items.map { ($0.key, $0.value) }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            client.connection.queue.async {
                printer.start(initial: current)
                continuation.resume()
            }
        }
        return items.map(\.key)
    }

    static let changes = MatchRule(sender: PropbusClient.busName, pathNamespace: Key.rootPath,
                                   interface: PropbusClient.propertiesInterface, member: "PropertiesChanged")
    static let ownerChanges = MatchRule.nameOwnerChanged(arg0: PropbusClient.busName)
}

/// Formats and prints changes; confined to the connection's queue.
///
/// `@unchecked Sendable`: only touched on that queue (signal handlers and `start`).
final class WatchPrinter: @unchecked Sendable {
    let patterns: [KeyPrefix]
    let json: Bool
    let timestamps: Bool
    private var started = false
    private var buffered: [(String, DBusValue)] = []

    init(patterns: [KeyPrefix], json: Bool, timestamps: Bool) {
        self.patterns = patterns
        self.json = json
        self.timestamps = timestamps
    }

    /// Whether `key` is one of the watched keys or below a watched prefix.
    func watches(_ key: String) -> Bool {
        patterns.isEmpty || patterns.contains { $0.matches(key) }
    }

    /// Prints the initial values, then the changes that arrived while they were read, skipping
    /// those the initial value already shows.
    func start(initial: [(String, DBusValue)]) {
        for (key, value) in initial { print(key, value) }
        started = true
        for (key, value) in buffered where !initial.contains(where: { $0.0 == key && $0.1 == value }) {
            print(key, value)
        }
        buffered = []
    }

    func received(_ message: Message) {
        guard let group = message.path.flatMap(Key.group(atPath:)),
              let args = try? message.arguments(), args.count == 3,
              args[0].stringValue == PropbusClient.valuesInterface,
              case .dictionary(_, _, let entries) = args[1] else { return }
        for entry in entries {
            guard let name = entry.key.stringValue else { continue }
            let key = group + "." + name
            guard watches(key) else { continue }
            let value = entry.value.unwrappingVariantOnce
            if started { print(key, value) } else { buffered.append((key, value)) }
        }
    }

    private func print(_ key: String, _ value: DBusValue) {
        let time = timestamps ? WallClockTime.now().iso8601 : nil
        if json {
            var members: [(String, JSONValue)] = [("key", .string(key)), ("value", ValueText.jsonValue(value))]
            if let time { members.append(("time", .string(time))) }
            Output.line(Output.json(.object(members)))
        } else {
            Output.line([time, key, Output.escaped(ValueText.format(value))].compactMap { $0 }.joined(separator: " "))
        }
    }
}
