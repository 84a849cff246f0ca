import CommandLineKit
import DBus
import Dispatch
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
enum WatchVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let patterns = parsed.positionals("KEY")
        for pattern in patterns where pattern.isEmpty || !pattern.utf8.allSatisfy({ ObjectPath.isElementByte($0) || $0 == UInt8(ascii: ".") }) {
            throw CommandFailure(.usage, "'\(pattern)' is neither a key nor a key prefix; \(Key.rule)")
        }
        let client = try await PropbusClient.connect(parsed)
        let connection = client.connection
        // --origin asks history who made each change (Manager.ListHistory, the key's latest
        // row): the daemon sends nothing more for it, and costs nothing when nobody asks.
        let origin: (@Sendable (String) async -> [String: DBusValue]?)?
        if parsed.flag("origin") { origin = { @Sendable key in await latestChange(of: key, client) } } else { origin = nil }
        let prefixes = patterns.map(KeyPrefix.init)
        let printer = LoopBound.handOver(WatchPrinter(patterns: prefixes, json: parsed.flag("json"), timestamps: parsed.flag("timestamps"),
                                                      queue: connection.queue, origin: origin) { key throws(CommandFailure) in
            try await client.value(of: PropbusClient.key(key))
        }, to: connection.queue)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            connection.queue.async {
                connection.whenDisconnected {
                    Output.error("propctl watch: the bus went away")
                    exit(CommandFailure.ExitCode.unavailable.rawValue)
                }
                connection.addSignalHandler(matching: Self.changes) { printer.value.received($0) }
                connection.addSignalHandler(matching: Self.ownerChanges) { message in
                    guard let args = try? message.arguments(), args.count == 3 else { return }
                    if args[2].stringValue == "" {
                        Output.error("propctl watch: propbusd left the bus; waiting for it to come back")
                    } else {
                        Output.error("propctl watch: propbusd is back; current values follow")
                        Task { await printCurrent(client, printer, prefixes) }
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
        let current = await printCurrent(client, printer, prefixes)
        // A typo would otherwise wait in silence; a group that does not exist yet may be meant.
        for pattern in prefixes where !pattern.text.isEmpty && !current.contains(where: pattern.matches) {
            let hint = await client.nearestKeyOrGroup(to: pattern.text).map { "; did you mean '\($0)'?" } ?? ""
            Output.error("propctl watch: no key or group named \(pattern.text) yet; waiting for it to appear\(hint)")
        }
        while true { try? await Task.sleep(for: .seconds(3600)) }
    }

    /// `key`'s latest row in history (who made its last change), `nil` when there is none.
    private static func latestChange(of key: String, _ client: PropbusClient) async -> [String: DBusValue]? {
        let reply: [DBusValue]
        do {
            reply = try await client.manager("ListHistory", [.string(key), .uint64(0), .uint32(1), .vardict(["latest": .variant(.boolean(true))])])
        } catch {
            return nil
        }
        guard case .array(_, let rows)? = reply.first else { return nil }
        return rows.first?.stringKeyedEntries?.mapValues(\.unwrappingVariantOnce)
    }

    /// Prints the current value of every watched key, then lets the changes through.
    /// Returns the keys printed.
    @discardableResult
    private static func printCurrent(_ client: PropbusClient, _ printer: LoopBound<WatchPrinter>, _ patterns: [KeyPrefix]) async -> [String] {
        // Nothing to print while the daemon is away; its return prints them all.
        let items = ((try? await client.list(prefix: "")) ?? []).filter { WatchPrinter.watches($0.key, patterns) }
        let current = items.map { ($0.key, $0.value) }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            client.connection.queue.async {
                printer.value.start(initial: current)
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
/// A property named as invalidated (a deleted key, or one whose signal carries no value) is
/// read back: a value is printed as a change, "no such key" as `KEY (deleted)`. Later changes
/// wait in `pending` meanwhile, so lines keep the order of the signals.
///
/// Only touched on that queue (signal handlers, `start`, the reads' completions, which hop back
/// onto it): the verb holds it as a ``LoopBound``.
final class WatchPrinter {
    /// A line to print: a value, or a key to read back first.
    private enum Event {
        case value(String, DBusValue)
        case invalidated(String)
    }

    let patterns: [KeyPrefix]
    let json: Bool
    let timestamps: Bool
    private let queue: DispatchQueue
    private let read: @Sendable (String) async throws(CommandFailure) -> DBusValue
    /// With `--origin`: the key's latest history row, who made the change just printed.
    private let origin: (@Sendable (String) async -> [String: DBusValue]?)?
    private var started = false
    private var buffered: [(String, DBusValue)] = []
    /// Events after `start`, in signal order; bounded by how fast the daemon answers one Get.
    private var pending: [Event] = []
    private var reading = false

    init(patterns: [KeyPrefix], json: Bool, timestamps: Bool, queue: DispatchQueue,
         origin: (@Sendable (String) async -> [String: DBusValue]?)? = nil,
         read: @escaping @Sendable (String) async throws(CommandFailure) -> DBusValue) {
        self.patterns = patterns
        self.json = json
        self.timestamps = timestamps
        self.queue = queue
        self.origin = origin
        self.read = read
    }

    /// Whether `key` is one of the watched keys or below a watched prefix.
    func watches(_ key: String) -> Bool {
        Self.watches(key, patterns)
    }

    /// Whether `key` is one of `patterns`' keys or below one of their prefixes (all, if none).
    static func watches(_ key: String, _ patterns: [KeyPrefix]) -> Bool {
        patterns.isEmpty || patterns.contains { $0.matches(key) }
    }

    /// Prints the initial values, then the changes that arrived while they were read, skipping
    /// those the initial value already shows. With `--origin`, a current value names the change
    /// that made it as a new one does, so the lines go through ``pending`` in order.
    func start(initial: [(String, DBusValue)]) {
        let lines = initial + buffered.filter { line in !initial.contains { $0.0 == line.0 && $0.1 == line.1 } }
        started = true
        buffered = []
        guard origin != nil else { return lines.forEach { print($0.0, $0.1) } }
        pending += lines.map { .value($0.0, $0.1) }
        drain()
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
            if started { pending.append(.value(key, value)) } else { buffered.append((key, value)) }
        }
        // Before start, the initial read shows what an invalidation would have said.
        if started, case .array(_, let names) = args[2] {
            for name in names.compactMap(\.stringValue) where watches(group + "." + name) {
                pending.append(.invalidated(group + "." + name))
            }
        }
        drain()
    }

    /// Prints pending events in order, up to the first one that needs a read.
    private func drain() {
        while !reading, !pending.isEmpty {
            switch pending.removeFirst() {
            case .value(let key, let value):
                guard let origin else {
                    print(key, value)
                    continue
                }
                // Later lines wait for this one's origin, so lines keep the signals' order.
                reading = true
                let printer = LoopBound(self, on: queue)
                Task {
                    let row = await origin(key)
                    printer.queue.async {
                        let printer = printer.value
                        printer.reading = false
                        printer.print(key, value, origin: row)
                        printer.drain()
                    }
                }
            case .invalidated(let key):
                reading = true
                let read = self.read, printer = LoopBound(self, on: queue)
                Task {
                    let result: Result<DBusValue, CommandFailure>
                    do throws(CommandFailure) { result = .success(try await read(key)) } catch { result = .failure(error) }
                    printer.queue.async {
                        let printer = printer.value
                        printer.reading = false
                        switch result {
                        case .success(let value): printer.print(key, value)
                        case .failure(let failure) where failure.message.contains(PropBusError.Code.unknownKey.dbusName):
                            printer.printDeleted(key)
                        case .failure: break   // a secret the caller may not read: nothing to show
                        }
                        printer.drain()
                    }
                }
            }
        }
    }

    private func printDeleted(_ key: String) {
        let time = timestamps ? WallClockTime.now().iso8601 : nil
        if json {
            var members: [(String, JSONValue)] = [("key", .string(key)), ("deleted", .bool(true))]
            if let time { members.append(("time", .string(time))) }
            Output.line(Output.json(.object(members)))
        } else {
            Output.line([time, key, "(deleted)"].compactMap { $0 }.joined(separator: " "))
        }
    }

    private func print(_ key: String, _ value: DBusValue, origin row: [String: DBusValue]? = nil) {
        let time = timestamps ? WallClockTime.now().iso8601 : nil
        // Only history's fields that say who and how, never its values (a secret's are redacted there anyway).
        let originFields = ["revision", "via", "uid", "user", "pid", "comm", "exe", "unit", "bus_name"]
        if json {
            var members: [(String, JSONValue)] = [("key", .string(key)), ("value", ValueText.jsonValue(value))]
            if let time { members.append(("time", .string(time))) }
            if let row {
                members.append(("origin", .object(originFields.compactMap { name in row[name].map { (name, ValueText.jsonValue($0)) } })))
            }
            Output.line(Output.json(.object(members)))
        } else {
            var words = [time, key, Output.escaped(ValueText.format(value))].compactMap { $0 }
            if let row {
                let via = row["via"]?.stringValue ?? "?"
                let who = HistoryVerb.who(row)
                words.append("# via \(Output.escaped(via))" + (who.isEmpty ? "" : " by \(Output.escaped(who))")
                             + (row["revision"].map { " @\(ValueText.format($0))" } ?? ""))
            } else if origin != nil {
                words.append("# origin unknown (no history)")
            }
            Output.line(words.joined(separator: " "))
        }
    }
}
