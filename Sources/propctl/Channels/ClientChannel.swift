import DBus
import Dispatch
import Glibc
import PropBus
import SystemKit

/// A two-way binding between one bus key and a local endpoint (`propctl bind`).
///
/// The bus leads, as RACChannelTo's right-hand side does: at the start the local side takes
/// the key's value and nothing is written to the bus.
///
/// No echo, never stale: a propagated value is compared with the **current** value of the
/// other side, never with a remembered one and never through an "ignore the next event" flag.
/// The current bus value is the last read plus every PropertiesChanged since; the current local
/// value is read again from the endpoint each time. So a value that came back from the other
/// side stops there, and a same-value write cannot swallow the next real change.
///
/// While one of our Sets is in flight, bus changes are not written locally: the local side is
/// newer than they are. When the last Set is answered the local side is reconciled with the bus
/// (propbusd sends a change's PropertiesChanged before the Set reply, so the tracked value is
/// current then). A failed Set is printed and the local side goes back to the bus value.
///
/// Confined to the connection's queue: every mutable field is touched only there; the signal
/// handlers, the call completions and the endpoint callbacks all run there, and what comes from
/// elsewhere (the disconnection, the subscription, a later look) hops over through a ``LoopBound``.
final class ClientChannel {
    private enum Phase { case reading, live, away }

    let connection: Connection
    let key: Key
    let endpoint: LocalEndpoint
    let transforms: ChannelTransforms
    let direction: ChannelDirection
    /// Where `--json` change events go, or nil without `--json`.
    let events: FileDescriptor?
    /// With `--verbose`: every decision, including the changes not propagated and why, on stderr.
    let verbose: Bool

    private var queue: DispatchQueue { connection.queue }
    private var phase = Phase.reading
    private var started = false
    private var type: DBusType?
    /// The bus value: the last read and every PropertiesChanged since; nil while unknown.
    private var bus: DBusValue?
    private var setsInFlight = 0
    /// The value of our latest successful Set: if the bus still holds it when the last reply
    /// arrives, the local side is where it came from and is not written back (as the daemon
    /// never writes a change back to its origin), so transforms that are not inverses of
    /// each other cannot start a loop.
    private var lastSetValue: DBusValue?
    /// The last state in which both sides agreed: the bus value and the local text it maps to
    /// (or came from). When both sides still show exactly this pair there is nothing to
    /// propagate, even if the transforms are not inverses of each other: a side never receives
    /// back, through the other side, a value that came from it. Both halves are compared with
    /// the current values, so the pair cannot go stale the way a one-sided memory does.
    private var agreed: (bus: DBusValue, local: String)?
    /// A local change that could not be sent yet (daemon away or being read again).
    private var localPending = false
    /// The local side ended; the channel ends with this once its last Set is answered.
    private var ending: CommandFailure??
    private var finished: CheckedContinuation<CommandFailure?, Never>?
    private var signalSources: [DispatchSourceSignal] = []
    /// Looks scheduled for later (a read of the bus, a write of the local side): the channel is
    /// not idle while one is (see ``awaitIdle()``).
    private var retriesScheduled = 0

    init(connection: Connection, key: Key, endpoint: LocalEndpoint, transforms: ChannelTransforms,
         direction: ChannelDirection, events: FileDescriptor?, verbose: Bool = false) {
        self.connection = connection
        self.key = key
        self.endpoint = endpoint
        self.transforms = transforms
        self.direction = direction
        self.events = events
        self.verbose = verbose
    }

    private var changesRule: MatchRule {
        MatchRule(sender: PropbusClient.busName, path: key.objectPath, interface: PropbusClient.propertiesInterface,
                  member: "PropertiesChanged", arg0: PropbusClient.valuesInterface)
    }

    private static let ownerRule = MatchRule.nameOwnerChanged(arg0: PropbusClient.busName)

    /// Runs `channel` until the local side ends, a signal arrives or the bus goes away. The
    /// channel is handed over to its connection's queue (`sending`: the caller keeps no use of it).
    static func run(_ channel: sending ClientChannel) async throws(CommandFailure) {
        let connection = channel.connection, rules = [channel.changesRule, Self.ownerRule]
        let bound = LoopBound.handOver(channel, to: connection.queue)
        let failure: CommandFailure? = await withCheckedContinuation { continuation in
            connection.queue.async { bound.value.start(continuation) }
            // Its answers come on the queue, after the start.
            Task { await subscribe(bound, to: rules, on: connection) }
        }
        if let failure { throw failure }
    }

    /// The start of ``run(_:)``, on the queue.
    private func start(_ continuation: CheckedContinuation<CommandFailure?, Never>) {
        finished = continuation
        let channel = LoopBound(weak: self, on: queue)
        connection.addSignalHandler(matching: changesRule) { [self] in busSignal($0) }
        connection.addSignalHandler(matching: Self.ownerRule) { [self] in ownerChanged($0) }
        connection.whenDisconnected { channel.object()?.finish(CommandFailure(.unavailable, "lost the connection to the bus")) }
        for number in [SIGINT, SIGTERM, SIGHUP] {
            // libdispatch on Linux takes the signal itself; the source lives as long as the channel.
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { [self] in finish(nil) }
            source.resume()
            signalSources.append(source)
        }
        if Self.reportsIdle {
            let source = DispatchSource.makeSignalSource(signal: SIGUSR1, queue: queue)
            source.setEventHandler { [self] in reportWhenIdle() }
            source.resume()
            signalSources.append(source)
        }
    }

    /// Subscribe first, then read: a change between an initial read and a later AddMatch would be lost.
    private static func subscribe(_ channel: LoopBound<ClientChannel>, to rules: [MatchRule], on connection: Connection) async {
        do {
            for rule in rules { try await connection.addMatch(rule) }
        } catch {
            let failure = CommandFailure(error)
            channel.queue.async { channel.value.finish(failure) }
            return
        }
        channel.queue.async { channel.value.readBus() }
    }

    // MARK: Reading the bus

    /// Reads the key's type and value, on the queue: the Get reply is handled in message order,
    /// after every PropertiesChanged sent before it and before any sent after it.
    private func readBus() {
        dispatchPrecondition(condition: .onQueue(queue))
        phase = .reading
        call(Key.rootPath, PropbusClient.managerInterface, "ListProperties", [.string(key.text)]) { [self] result in
            switch result {
            case .failure(let error):
                readFailed(CommandFailure(error))
            case .success(let reply):
                let rows: [DBusValue]
                if case .array(_, let items)? = reply.first { rows = items } else { rows = [] }
                let listed = rows.lazy.compactMap { row -> String? in
                    guard case .structure(let fields) = row, fields.count == 4, fields[0].stringValue == self.key.text else { return nil }
                    return fields[1].stringValue
                }.first
                guard let signature = listed, let type = try? DBusType(parsing: signature) else {
                    readFailed(CommandFailure(.dbusError, "\(PropBusError.Code.unknownKey.dbusName): no property named \(key)"))
                    return
                }
                if !started {
                    do throws(CommandFailure) { try transforms.check(against: type, key: key) } catch {
                        finish(error)
                        return
                    }
                }
                self.type = type
                readValue()
            }
        }
    }

    private func readValue() {
        call(key.objectPath, PropbusClient.propertiesInterface, "Get", [.string(PropbusClient.valuesInterface), .string(key.name)]) { [self] result in
            switch result {
            case .failure(let error):
                readFailed(CommandFailure(error))
            case .success(let reply):
                guard let value = reply.first?.unwrappingVariantOnce else {
                    readFailed(CommandFailure(.dbusError, "propbusd answered Get for \(key) with \(reply)"))
                    return
                }
                bus = value
                becameLive()
            }
        }
    }

    /// At the start a failed read ends propctl; after a restart it is retried while the daemon
    /// is there (it may still be registering its keys).
    private func readFailed(_ failure: CommandFailure) {
        guard started else {
            finish(failure)
            return
        }
        guard phase == .reading else { return }
        report("cannot read \(key) from propbusd: \(failure.message); retrying")
        retriesScheduled += 1
        LoopBound(weak: self, on: queue).async(after: .now() + .milliseconds(500)) { channel in
            channel.retriesScheduled -= 1
            if channel.phase == .reading { channel.readBus() }
        }
    }

    private func becameLive() {
        phase = .live
        if !started {
            started = true
            do throws(CommandFailure) {
                try endpoint.start(on: queue, changed: { [self] in localChanged($0) }, ended: { [self] in localEnded($0) })
            } catch {
                finish(error)
                return
            }
            // The bus wins at the start, unless only local → bus is wanted.
            if direction.towardsLocal { pushToLocal() } else { pushToBus() }
            return
        }
        // Back after a restart: a local change made meanwhile goes to the bus; otherwise the
        // local side is resynchronized from the bus.
        if localPending, direction.towardsBus {
            localPending = false
            pushToBus()
        } else {
            localPending = false
            pushToLocal()
        }
    }

    // MARK: Bus events

    private func busSignal(_ message: Message) {
        guard message.path == key.objectPath, let arguments = try? message.arguments(), arguments.count == 3,
              arguments[0].stringValue == PropbusClient.valuesInterface else { return }
        if let value = arguments[1].stringKeyedEntries?[key.name] {
            bus = value.unwrappingVariantOnce
        } else if case .array(_, let names) = arguments[2], names.contains(.string(key.name)), phase == .live {
            // Invalidated without a value: read it.
            readValue()
            return
        } else {
            return
        }
        guard phase == .live else { return }
        pushToLocal()
    }

    private func ownerChanged(_ message: Message) {
        guard let arguments = try? message.arguments(), arguments.count == 3,
              arguments[0].stringValue == PropbusClient.busName, let newOwner = arguments[2].stringValue else { return }
        guard started else { return }
        if newOwner.isEmpty {
            phase = .away
            bus = nil
            report("propbusd left the bus; waiting for it to come back")
        } else {
            report("propbusd is back; resynchronizing \(key)")
            readBus()
        }
    }

    // MARK: Local events

    /// `text` is what the endpoint read and checked for this change: a deleted file (`nil`) is
    /// no value, and a read now could catch the next writer half-way.
    private func localChanged(_ text: String?) {
        guard direction.towardsBus else {
            trace("\(localSummary) changed; not sent (--direction from)")
            return
        }
        guard phase == .live else {
            localPending = true
            trace("\(localSummary) changed while propbusd is away; it is sent when propbusd is back")
            return
        }
        guard let text else { return }
        pushToBus(text)
    }

    private func localEnded(_ failure: CommandFailure?) {
        ending = .some(failure)
        if setsInFlight == 0 { finish(failure) }
    }

    // MARK: Propagation

    /// Local → bus: Set the mapped local value unless the bus already has it; `known` is the
    /// local value when the caller has just read it.
    private func pushToBus(_ known: String? = nil) {
        guard direction.towardsBus, phase == .live, let type, let text = known ?? endpoint.current() else { return }
        let value: DBusValue
        do throws(ChannelError) {
            value = try transforms.busValue(for: text, key: key, type: type, current: bus)
        } catch {
            report("\(endpoint.label): \(error.message)")
            pushToLocal()
            return
        }
        if value == bus {
            trace("\(endpoint.label) shows \(ValueText.json(value)), which the bus holds; nothing sent")
            return
        }
        if let agreed, agreed.local == text, agreed.bus == bus {
            trace("\(endpoint.label) and the bus still show the last agreed pair; nothing sent")
            return
        }
        if let agreed, agreed.local == text, direction.towardsLocal {
            // The local side still shows what both sides last agreed on, so it has not changed
            // since; the bus has. An event that changed nothing (a chmod, the late delivery of
            // our own write) can come after a bus change that waited behind it: the bus value
            // is the newer one and goes to the local side, rather than being undone.
            trace("\(endpoint.label) still shows the last agreed value and the bus moved on; the bus value is written")
            pushToLocal()
            return
        }
        setsInFlight += 1
        trace("sending \(ValueText.json(value)) from \(endpoint.label)")
        call(key.objectPath, PropbusClient.propertiesInterface, "Set",
             [.string(PropbusClient.valuesInterface), .string(key.name), .variant(value)]) { [self] result in
            setsInFlight -= 1
            switch result {
            case .success:
                lastSetValue = value
                agreed = (value, text)
                event("to", ValueText.jsonValue(value))
                trace("set \(key) to \(ValueText.json(value))")
            case .failure(let error):
                let failure = CommandFailure(error)
                if failure.code == .unavailable {
                    // The daemon is going away: the change is sent again once it is back.
                    localPending = true
                } else {
                    report("cannot set \(key) to \(ValueText.format(value)): \(failure.message)")
                }
            }
            guard setsInFlight == 0 else { return }
            if let ending {
                finish(ending)
                return
            }
            // Bus changes that arrived meanwhile were held back; a failed Set leaves the local
            // side to be put back. Either way: make local match the bus now, unless the bus
            // holds just what this side sent.
            defer { lastSetValue = nil }
            if case .success = result, bus == lastSetValue {
                trace("the bus holds what was sent; nothing written back")
                // The local side may have moved on while the Set was in flight: a value then
                // compared with the bus as it was before the Set looked like no change and was
                // not sent. Compare its current value with the bus now, and send it if they differ.
                // A change whose events are queued is delivered through them, and a file another
                // program is writing is not read half-way: its close (or settle) brings it.
                endpoint.deliverPending()
                guard setsInFlight == 0, !endpoint.isBeingWritten else { return }
                endpoint.whenQuiet { [self] current in
                    // A Set that left meanwhile looks again when it is answered.
                    guard setsInFlight == 0, let current, current != text else { return }
                    pushToBus(current)
                }
                return
            }
            pushToLocal()
        }
    }

    /// Bus → local: write the mapped bus value unless the local side already shows it.
    private func pushToLocal() {
        guard direction.towardsLocal else {
            if phase == .live, let bus { trace("\(key) is \(ValueText.json(bus)); not written (--direction to)") }
            return
        }
        guard phase == .live, let bus else { return }
        // A local change that happened before this bus change was seen goes first.
        endpoint.deliverPending()
        guard setsInFlight == 0, !endpoint.isBeingWritten else { return }
        let text: String
        do {
            text = try transforms.localText(for: bus, key: key)
        } catch {
            report(error.message)
            return
        }
        if endpoint.current() == text {
            agreed = (bus, text)
            trace("\(endpoint.label) already shows \(key)'s value; nothing written")
            return
        }
        do {
            if try endpoint.write(text) {
                agreed = (bus, text)
                event("from", .string(text))
                trace("wrote \(key)'s value to \(endpoint.label)")
            } else if !direction.towardsBus {
                // The write yielded to a local change; with --direction from nothing else will
                // bring the bus value back, so look again once that change has settled.
                retriesScheduled += 1
                LoopBound(weak: self, on: queue).async(after: .now() + .milliseconds(100)) { channel in
                    channel.retriesScheduled -= 1
                    channel.pushToLocal()
                }
            }
        } catch {
            report(error.message)
        }
    }

    // MARK: Test barrier

    /// Test only (`PROPCTL_TEST_IDLE_REPORT` set): SIGUSR1 makes propctl say `test: idle` on
    /// stderr once it has handled everything that happened before the signal, so a test can
    /// close its window ("no echo came") with a marker write instead of a sleep.
    private static let reportsIdle = Environment.value("PROPCTL_TEST_IDLE_REPORT") != nil

    /// A Ping to propbusd first: its reply comes after every signal propbusd sent before it.
    private func reportWhenIdle() {
        call(key.objectPath, "org.freedesktop.DBus.Peer", "Ping", []) { [self] _ in awaitIdle() }
    }

    /// Idle: local events delivered, none waiting to settle or to be looked at again, no retry
    /// scheduled and no Set in flight (an echo's PropertiesChanged goes out before its reply).
    private func awaitIdle() {
        endpoint.deliverPending()
        if phase == .live, setsInFlight == 0, retriesScheduled == 0, endpoint.isIdle {
            report("test: idle")
            return
        }
        LoopBound(weak: self, on: queue).async(after: .now() + .milliseconds(5)) { $0.awaitIdle() }
    }

    // MARK: Plumbing

    private func call(_ path: String, _ interface: String, _ member: String, _ arguments: [DBusValue],
                      completion: @escaping (Result<[DBusValue], DBusError>) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        do {
            let message = try Message.methodCall(destination: PropbusClient.busName, path: path, interface: interface, member: member)
            try message.append(arguments)
            connection.call(message, timeoutMilliseconds: 25_000) { result in
                completion(result.flatMap { reply in Result { () throws(DBusError) in try reply.arguments() } })
            }
        } catch {
            completion(.failure(error))
        }
    }

    private func report(_ text: String) {
        Output.error("propctl bind \(key): \(text)")
    }

    /// The endpoint and its current text, for `--verbose` lines (read only when they are printed).
    private var localSummary: String {
        "\(endpoint.label) (now \(endpoint.current().map { ValueText.json(.string($0)) } ?? "unreadable"))"
    }

    /// One `--verbose` line: what the channel decided, so a user (or a test) can see that a change
    /// was seen and why it stopped.
    /// An autoclosure: the text may read the endpoint, which only `--verbose` pays for.
    private func trace(_ text: @autoclosure () -> String) {
        guard verbose else { return }
        report(text())
    }

    private func event(_ direction: String, _ value: JSONValue) {
        guard let events else { return }
        let line = Output.json(.object([("direction", .string(direction)), ("key", .string(key.text)), ("value", value)]))
        Output.write(line + "\n", to: events)
    }

    private func finish(_ failure: CommandFailure?) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let continuation = finished else { return }
        finished = nil
        endpoint.stop()
        continuation.resume(returning: failure)
    }
}
