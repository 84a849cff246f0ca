import DBus
import Dispatch

/// A connection to `propbusd`, the property daemon, from a Swift program.
///
/// ```swift
/// let client = try await PropBusClient.connect(.session)
/// let volume = client.property("settings.volume", as: Int32.self)
/// for await level in volume.values { print("volume", level) }
/// ```
///
/// The client follows the daemon's bus name: when the daemon goes away every property turns
/// ``PropertyState/stale``, and when it comes back every property reads its value again and
/// goes on delivering changes on the same sequences.
public final class PropBusClient: @unchecked Sendable {
    // Safety: a public handle that programs share between tasks, hence `Sendable`; the `let`s
    // are immutable, and every mutable field is touched only on the connection's serial queue
    // (the methods hop there first).
    /// Which bus the daemon is on.
    public enum Bus: Sendable, Hashable {
        /// The user's session bus (`DBUS_SESSION_BUS_ADDRESS`, else `$XDG_RUNTIME_DIR/bus`).
        case session
        /// The system bus (`DBUS_SYSTEM_BUS_ADDRESS`, else the standard socket).
        case system
        /// A bus at a D-Bus address, e.g. `unix:path=/run/user/1000/bus`.
        case address(String)

        var busAddress: BusAddress {
            switch self {
            case .session: .session
            case .system: .system
            case .address(let address): .address(address)
            }
        }
    }

    let connection: Connection
    var queue: DispatchQueue { connection.queue }

    // Confined to `queue`.
    /// The daemon's unique name while it owns its bus name.
    private(set) var daemonOwner: String?
    /// Whether the connection to the bus is gone (nothing comes back then).
    private(set) var disconnected = false
    /// Every live property, by group object path, then property name.
    private var sinks: [String: [String: [WeakSink]]] = [:]
    /// The match rules the bus has confirmed, or is confirming, by rule text.
    private var matches: [String: Task<Void, Never>] = [:]
    /// Where command signals go (confined to `queue`).
    let commandSignals = CommandSignals()
    /// Run once when the client closes (streams that end then).
    private var closers: [() -> Void] = []
    /// Who follows `LocksChanged` (bindings, for their writability), by token.
    private var lockListeners: [Int: (Set<String>) -> Void] = [:]
    private var nextListener = 0
    /// Bound model writes sent and not answered yet (confined to `queue`).
    let boundWrites = BoundWrites()
    /// The model sides of the live two-way bindings, to send their writes made this turn.
    let boundModels = BoundModels()
    /// The daemon's `Changed` signals, to ``changes`` streams (confined to `queue`).
    var changeObservers: [Int: (Message) -> Void] = [:]
    /// The app's handlers of `handler=true` commands, once one is served.
    var handlers: CommandHandlers?

    /// This client's unique name on the bus (`:1.42`), as the daemon and monitors see it.
    public var uniqueName: String { connection.uniqueName }

    private init(connection: Connection) {
        self.connection = connection
    }

    /// Connects to the bus and starts following the daemon.
    ///
    /// The daemon need not be running: properties made before it starts are ``PropertyState/stale``
    /// until it does.
    public static func connect(_ bus: Bus) async throws(PropBusClientError) -> PropBusClient {
        let connection: Connection
        do { connection = try await Connection.connect(to: bus.busAddress) } catch { throw PropBusClientError(error) }
        let client = PropBusClient(connection: connection)
        await client.onQueue { client.installHandlers() }
        do {
            // Subscribe before asking, so an owner change between the two is not missed.
            try await connection.addMatch(.nameOwnerChanged(arg0: DaemonNames.busName))
            // Groups that appear or go (a key created in a new group, a group's last key deleted).
            for member in ["InterfacesAdded", "InterfacesRemoved"] {
                try await connection.addMatch(MatchRule(sender: DaemonNames.busName, path: DaemonNames.rootPath,
                                                        interface: DaemonNames.objectManagerInterface, member: member))
            }
            // Locks that come or go change what bindings may write.
            try await connection.addMatch(MatchRule(sender: DaemonNames.busName, path: DaemonNames.rootPath,
                                                    interface: DaemonNames.managerInterface, member: "LocksChanged"))
            let owner = try? await connection.callBus("GetNameOwner", [.string(DaemonNames.busName)]).first?.stringValue
            await client.onQueue { client.ownerAnswered(owner) }
        } catch {
            connection.close()
            throw PropBusClientError(error)
        }
        return client
    }

    deinit {
        connection.close()
    }

    /// Closes the connection; every property turns ``PropertyState/stale`` and its sequences end.
    public func close() {
        queue.async { [self] in
            disconnected = true
            // An execution this client still waits for has nobody to take its result (the
            // connection's close flushes these).
            for (path, id) in commandSignals.awaited {
                if let message = Self.commandCall(path, "Cancel", .uint64(id)) { connection.send(message) }
            }
            commandSignals.failAll(PropBusClientError(name: Name.disconnected, message: "the client closed"))
            forEachSink { $0.finish() }
            sinks = [:]
            let closing = closers
            closers = []
            for closer in closing { closer() }
            // A `Start` still on its way: its answer's id is cancelled, then the connection closes.
            if commandSignals.startsInFlight == 0 { connection.close() }
        }
    }

    /// Starts an execution of the command at `path` (`Start`), counted while its answer is on
    /// its way: a client closing meanwhile cancels the execution when the id comes back.
    func start(commandAt path: String, input: DBusValue) async throws(PropBusClientError) -> UInt64 {
        let outcome: Result<UInt64, PropBusClientError> = await withCheckedContinuation { continuation in
            queue.async { [self] in
                guard !disconnected, let message = Self.commandCall(path, "Start", .variant(input)) else {
                    continuation.resume(returning: .failure(PropBusClientError(name: Name.disconnected, message: "the client closed")))
                    return
                }
                commandSignals.startsInFlight += 1
                connection.call(message, timeoutMilliseconds: -1) { [self] reply in
                    commandSignals.startsInFlight -= 1
                    let outcome = Self.executionID(reply, of: path)
                    if disconnected {
                        if case .success(let id) = outcome, let cancel = Self.commandCall(path, "Cancel", .uint64(id)) { connection.send(cancel) }
                        if commandSignals.startsInFlight == 0 { connection.close() }
                    }
                    continuation.resume(returning: outcome)
                }
            }
        }
        return try outcome.get()
    }

    private static func commandCall(_ path: String, _ member: String, _ argument: DBusValue) -> Message? {
        guard let message = try? Message.methodCall(destination: DaemonNames.busName, path: path,
                                                    interface: DaemonNames.commandInterface, member: member),
              (try? message.append([argument])) != nil else { return nil }
        return message
    }

    private static func executionID(_ reply: Result<Message, DBusError>, of path: String) -> Result<UInt64, PropBusClientError> {
        switch reply {
        case .failure(let error): return .failure(PropBusClientError(error))
        case .success(let message):
            if let error = message.error { return .failure(PropBusClientError(error)) }
            guard case .uint64(let id)? = try? message.arguments().first else {
                return .failure(PropBusClientError(name: DBusError.Name.failed, message: "Start of \(path) replied no id"))
            }
            return .success(id)
        }
    }

    private typealias Name = PropBusClientError.Name

    /// Runs `body` (on the queue) when the client closes, at once if it has.
    func onClose(_ body: @escaping () -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        if disconnected { body() } else { closers.append(body) }
    }

    /// A typed view of `key`: its cached value, its changes, and writes.
    ///
    /// Returns at once; the property subscribes and reads the value in the background (its
    /// ``Property/values`` start with that value). A key that is not a valid `group.name` gives a
    /// property that stays ``PropertyState/stale`` and whose writes fail with `InvalidKey`.
    public func property<Value: DBusValueConvertible>(_ key: String, as type: Value.Type = Value.self) -> Property<Value> {
        let property = Property<Value>(client: self, key: key)
        queue.async { [self] in register(property) }
        return property
    }

    /// A two-way channel between `property` and a model's property (``PropertyChannel/bind(_:of:)``).
    public func channel<Value: DBusValueConvertible>(_ property: Property<Value>) -> PropertyChannel<Value> {
        PropertyChannel(property: property)
    }

    /// A command of the daemon (`viewmodel.executeSearch`), taking `Input` and answering `Output`.
    public func command<Input: DBusValueConvertible, Output: DBusValueConvertible>(
        _ key: String, input: Input.Type = String.self, output: Output.Type = String.self
    ) -> Command<Input, Output> {
        Command(client: self, key: key)
    }

    // MARK: Following the daemon

    private func installHandlers() {
        dispatchPrecondition(condition: .onQueue(queue))
        connection.addSignalHandler(matching: .nameOwnerChanged(arg0: DaemonNames.busName)) { [weak self] message in
            guard let self, let arguments = try? message.arguments(), arguments.count == 3,
                  let newOwner = arguments[2].stringValue else { return }
            self.ownerChanged(newOwner.isEmpty ? nil : newOwner)
        }
        connection.addSignalHandler(matching: MatchRule(interface: DaemonNames.propertiesInterface,
                                                        member: "PropertiesChanged")) { [weak self] message in
            self?.propertiesChanged(message)
        }
        connection.addSignalHandler(matching: MatchRule(path: DaemonNames.rootPath, interface: DaemonNames.objectManagerInterface,
                                                        member: "InterfacesAdded")) { [weak self] message in
            self?.interfacesAdded(message)
        }
        connection.addSignalHandler(matching: MatchRule(path: DaemonNames.rootPath, interface: DaemonNames.objectManagerInterface,
                                                        member: "InterfacesRemoved")) { [weak self] message in
            self?.interfacesRemoved(message)
        }
        connection.addSignalHandler(matching: MatchRule(interface: DaemonNames.commandInterface)) { [weak self] message in
            guard let self, let owner = self.daemonOwner, message.sender == owner else { return }
            self.commandSignals.received(message)
        }
        connection.addSignalHandler(matching: MatchRule(path: DaemonNames.rootPath, interface: DaemonNames.managerInterface,
                                                        member: "LocksChanged")) { [weak self] message in
            guard let self, let owner = self.daemonOwner, message.sender == owner,
                  case .array(_, let items)? = try? message.arguments().first else { return }
            let keys = Set(items.compactMap(\.stringValue))
            for listener in self.lockListeners.values { listener(keys) }
        }
        connection.addSignalHandler(matching: MatchRule(path: DaemonNames.rootPath, member: "Changed")) { [weak self] message in
            guard let self, let owner = self.daemonOwner, message.sender == owner else { return }
            for observer in self.changeObservers.values { observer(message) }
        }
        connection.whenDisconnected { [weak self] in
            guard let self else { return }
            self.disconnected = true
            self.daemonOwner = nil
            self.forEachSink { $0.daemonVanished() }
            self.commandSignals.failAll(PropBusClientError(name: Name.disconnected, message: "the connection to the bus is gone"))
        }
    }

    private var ownerKnown = false

    private func ownerAnswered(_ owner: String?) {
        // A NameOwnerChanged that arrived before the answer is newer than it.
        guard !ownerKnown else { return }
        ownerChanged(owner)
    }

    private func ownerChanged(_ owner: String?) {
        dispatchPrecondition(condition: .onQueue(queue))
        ownerKnown = true
        guard owner != daemonOwner else { return }
        daemonOwner = owner
        if owner == nil {
            forEachSink { $0.daemonVanished() }
        } else {
            forEachSink { $0.resync() }
            // A restarted daemon has forgotten its handlers.
            handlers?.registerAgain()
        }
        for listener in lockListeners.values { listener([]) }
    }

    private func propertiesChanged(_ message: Message) {
        // Only the daemon's own signals count: anyone may send a PropertiesChanged on this path.
        guard let owner = daemonOwner, message.sender == owner, let path = message.path,
              let group = sinks[path], let arguments = try? message.arguments(), arguments.count == 3,
              arguments[0].stringValue == DaemonNames.valuesInterface else { return }
        if let changed = arguments[1].stringKeyedEntries {
            for (name, value) in changed {
                for sink in group[name] ?? [] { sink.sink?.busChanged(value.unwrappingVariant) }
            }
        }
        if case .array(_, let invalidated) = arguments[2] {
            for name in invalidated.compactMap(\.stringValue) {
                for sink in group[name] ?? [] { sink.sink?.resync() }
            }
        }
    }

    /// A group object appeared: its `Values` carry every key's value, as a `PropertiesChanged` would.
    private func interfacesAdded(_ message: Message) {
        guard let owner = daemonOwner, message.sender == owner, let arguments = try? message.arguments(),
              arguments.count == 2, case .objectPath(let path) = arguments[0], let group = sinks[path],
              let interfaces = arguments[1].stringKeyedEntries,
              let values = interfaces[DaemonNames.valuesInterface]?.stringKeyedEntries else { return }
        for (name, value) in values {
            for sink in group[name] ?? [] { sink.sink?.busChanged(value.unwrappingVariant) }
        }
    }

    /// A group object went: its properties read again (and turn stale, their key being gone).
    private func interfacesRemoved(_ message: Message) {
        guard let owner = daemonOwner, message.sender == owner, let arguments = try? message.arguments(),
              arguments.count == 2, case .objectPath(let path) = arguments[0], let group = sinks[path] else { return }
        for list in group.values {
            for sink in list { sink.sink?.resync() }
        }
    }

    private func register(_ sink: PropertySink) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !disconnected, let (path, name) = DaemonNames.locate(sink.key) else {
            sink.daemonVanished()
            return
        }
        var group = sinks[path] ?? [:]
        var list = (group[name] ?? []).filter { $0.sink != nil }
        list.append(WeakSink(sink))
        group[name] = list
        sinks[path] = group
        if daemonOwner != nil { sink.resync() } else { sink.daemonVanished() }
    }

    /// Waits until the bus confirmed the `PropertiesChanged` rule of `path` (added once per group),
    /// so a read made afterwards cannot miss a change.
    func subscribe(to path: String) async {
        await addMatchOnce(MatchRule(sender: DaemonNames.busName, path: path, interface: DaemonNames.propertiesInterface,
                                     member: "PropertiesChanged"))
    }

    /// Waits until the bus confirmed the rule for the signals of the command object at `path`.
    func subscribeToCommand(_ path: String) async {
        await addMatchOnce(MatchRule(sender: DaemonNames.busName, path: path, interface: DaemonNames.commandInterface))
    }

    /// Adds `rule` once per client and waits until the bus confirmed it.
    func addMatchOnce(_ rule: MatchRule) async {
        let task: Task<Void, Never> = await onQueue { [self] in
            if let task = matches[rule.text] { return task }
            let task = Task { [connection] in _ = try? await connection.addMatch(rule) }
            matches[rule.text] = task
            return task
        }
        await task.value
    }

    /// Follows `LocksChanged` (on the queue): `listener` gets the keys whose locks changed, and
    /// an empty set when the daemon came back (everything may have changed). Returns a token.
    func addLockListener(_ listener: @escaping (Set<String>) -> Void) -> Int {
        dispatchPrecondition(condition: .onQueue(queue))
        nextListener += 1
        lockListeners[nextListener] = listener
        return nextListener
    }

    func removeLockListener(_ token: Int) {
        dispatchPrecondition(condition: .onQueue(queue))
        lockListeners[token] = nil
    }

    /// Sends the writes bound models made so far (their observation tasks may not have run) and
    /// waits until the daemon answered every bound write: it committed them, or refused them
    /// and the models got its value back.
    public func commitBoundWrites() async {
        if boundModels.count.withLock({ $0 }) > 0 {
            await MainActor.run { boundModels.sendUnsentWrites() }
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            queue.async { [self] in
                boundWrites.whenNoneLeft(continuation)
            }
        }
    }

    private func forEachSink(_ body: (PropertySink) -> Void) {
        for group in sinks.values {
            for list in group.values {
                for weak in list { if let sink = weak.sink { body(sink) } }
            }
        }
    }

    /// Runs `body` on the queue and waits for it without blocking a thread.
    func onQueue<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in queue.async { continuation.resume(returning: body()) } }
    }

    /// Calls a method of the daemon and returns its reply arguments; errors are thrown typed.
    func callDaemon(path: String, interface: String, member: String, _ arguments: [DBusValue],
                    timeoutMilliseconds: Int32 = -1) async throws(PropBusClientError) -> [DBusValue] {
        do {
            return try await connection.call(destination: DaemonNames.busName, path: path, interface: interface,
                                             member: member, arguments: arguments, timeoutMilliseconds: timeoutMilliseconds)
        } catch {
            throw PropBusClientError(error)
        }
    }
}

/// What the client tells a property, on the client's queue.
protocol PropertySink: AnyObject {
    var key: String { get }
    /// A value from the daemon's `PropertiesChanged` (already unwrapped from its variant).
    func busChanged(_ value: DBusValue)
    /// The daemon came (back), or the property's value was invalidated: read it again.
    func resync()
    /// The daemon left the bus.
    func daemonVanished()
    /// The client closed.
    func finish()
}

/// The client does not keep properties alive: a property nobody holds stops being followed.
struct WeakSink {
    weak var sink: PropertySink?
    init(_ sink: PropertySink) { self.sink = sink }
}
