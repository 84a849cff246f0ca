import DBus
import Foundation
import PropBus

/// `propctl watch [KEY|PREFIX...]`: one line per change until interrupted.
///
/// It subscribes before it reads: an AddMatch after the first Get would lose any change made
/// between the two. Exact keys print their current value first.
enum WatchCommand: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let patterns = parsed.positionals("KEY")
        for pattern in patterns where pattern.isEmpty || !pattern.utf8.allSatisfy({ ObjectPath.isElementByte($0) || $0 == UInt8(ascii: ".") }) {
            throw CommandFailure(.usage, "'\(pattern)' is neither a key nor a key prefix; \(Key.rule)")
        }
        let printer = WatchPrinter(patterns: patterns, json: parsed.flag("json"), timestamps: parsed.flag("timestamps"))
        let client = try await PropbusClient.connect(parsed)
        let connection = client.connection
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            connection.queue.async {
                connection.addSignalHandler(matching: Self.changes) { printer.received($0) }
                connection.addSignalHandler(matching: Self.ownerChanges) { message in
                    guard let args = try? message.arguments(), args.count == 3 else { return }
                    if args[2].stringValue == "" {
                        Output.error("propctl: propbusd left the bus; waiting for it to come back")
                    } else if args[1].stringValue == "" {
                        Output.error("propctl: propbusd is back")
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
        var initial: [(Key, DBusValue)] = []
        for pattern in patterns {
            guard let key = try? Key(pattern) else { continue }
            // A prefix that also parses as a key (settings.ui) is not an error when no such key exists.
            if let value = try? await client.value(of: key) { initial.append((key, value)) }
        }
        let initialValues = initial
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            connection.queue.async {
                printer.start(initial: initialValues)
                continuation.resume()
            }
        }
        while true { try? await Task.sleep(for: .seconds(3600)) }
    }

    static let changes = MatchRule(sender: PropbusClient.busName, pathNamespace: Key.rootPath,
                                   interface: PropbusClient.propertiesInterface, member: "PropertiesChanged")
    static let ownerChanges = MatchRule(sender: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                        interface: "org.freedesktop.DBus", member: "NameOwnerChanged", arg0: PropbusClient.busName)
}

/// Formats and prints changes; confined to the connection's queue.
///
/// `@unchecked Sendable`: only touched on that queue (signal handlers and `start`).
final class WatchPrinter: @unchecked Sendable {
    let patterns: [String]
    let json: Bool
    let timestamps: Bool
    private var started = false
    private var buffered: [(String, DBusValue)] = []

    init(patterns: [String], json: Bool, timestamps: Bool) {
        self.patterns = patterns
        self.json = json
        self.timestamps = timestamps
    }

    /// Whether `key` is one of the watched keys or below a watched prefix.
    func watches(_ key: String) -> Bool {
        patterns.isEmpty || patterns.contains { key == $0 || key.hasPrefix($0 + ".") }
    }

    /// Prints the initial values, then the changes that arrived while they were read, skipping
    /// those the initial value already shows.
    func start(initial: [(Key, DBusValue)]) {
        for (key, value) in initial { print(key.text, value) }
        started = true
        for (key, value) in buffered where !initial.contains(where: { $0.0.text == key && $0.1 == value }) {
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
        let time = timestamps ? Date().formatted(.iso8601.year().month().day().time(includingFractionalSeconds: true).timeZone(separator: .omitted)) : nil
        if json {
            var members: [(String, JSONValue)] = [("key", .string(key)), ("value", ValueText.jsonValue(value))]
            if let time { members.append(("time", .string(time))) }
            Output.line(Output.json(.object(members)))
        } else {
            Output.line([time, key, ValueText.format(value)].compactMap { $0 }.joined(separator: " "))
        }
    }
}
