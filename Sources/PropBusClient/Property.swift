import DBus
import Dispatch

/// One key of the daemon, typed: its cached value, its changes as a sequence, and writes.
///
/// Made by ``PropBusClient/property(_:as:)``. The cache is kept fresh by the daemon's
/// `PropertiesChanged` signals; after the daemon restarts it is read again and the same
/// ``values`` sequences go on.
public final class Property<Value: DBusValueConvertible>: @unchecked Sendable, PropertySink {
    // Safety: a public handle shared between tasks, hence `Sendable`; the mutable fields are
    // confined to the client's queue, except the snapshot behind a lock (``Locked``) that
    // ``current`` and ``state`` read from any thread.
    /// The key, e.g. `settings.volume`.
    public let key: String
    /// The client this property belongs to.
    public let client: PropBusClient

    /// Changes a slow reader has not taken yet, per ``values`` sequence; beyond it the oldest
    /// are dropped (the newest value always arrives).
    public static var bufferLimit: Int { 65_536 }

    private let location: (path: String, name: String)?
    private let snapshot = Locked<(value: Value?, state: PropertyState)>((nil, .stale))

    // Confined to the client's queue.
    /// The last value accepted from the daemon, as sent (compared by wire bytes).
    private var last: DBusValue?
    private var confinedState: PropertyState = .stale
    /// Bumped by every read of the value, so an older read's answer is ignored.
    private var generation = 0
    /// Whether a read of the value is on its way.
    private var reading = false
    /// Whether that read waits for its match rule and is not sent yet: a signal then is older
    /// than the read's answer.
    private var readUnsent = false
    /// The last signal that came while the read was out. The daemon answers a round's calls
    /// after that round's signals, so such a signal is either from the read's own round (and
    /// newer than its answer) or from an earlier one, when the answer holds the same value.
    private var changedDuringRead: DBusValue?
    /// Writes waiting until the read is sent: sent after it, their signal follows its answer, so
    /// ``current`` shows a write when it returns.
    private var readWaiters: [CheckedContinuation<Void, Never>] = []
    private var nextID = 0
    private var valueSubscribers: [Int: AsyncStream<Value>.Continuation] = [:]
    private var stateSubscribers: [Int: AsyncStream<PropertyState>.Continuation] = [:]
    /// Raw observers on the queue (channels), told every accepted wire value in order.
    private var observers: [Int: (DBusValue) -> Void] = [:]

    init(client: PropBusClient, key: String) {
        self.client = client
        self.key = key
        location = DaemonNames.locate(key)
    }

    /// The cached value: the daemon's latest while ``state`` is ``PropertyState/live``, the last
    /// known one while it is ``PropertyState/stale``, `nil` before the first read and on a type
    /// mismatch.
    public var current: Value? { snapshot.withLock { $0.value } }

    /// Whether ``current`` can be trusted.
    public var state: PropertyState { snapshot.withLock { $0.state } }

    /// The value first (once known), then every change in the order the daemon made them, never
    /// the same value twice in a row. Goes on across daemon restarts (a value that changed while
    /// the daemon was away is delivered when it is back); ends when the client closes.
    ///
    /// Each access is a new sequence with its own buffer (``bufferLimit``); it keeps the property
    /// alive while it is iterated.
    public var values: AsyncStream<Value> {
        // Holds the property while the stream is iterated (a temporary property, or one whose
        // last use was `.values`, goes on); the consumer dropping the stream ends it.
        valueStream(buffer: Self.bufferLimit)
    }

    /// ``values`` for a consumer that only needs the newest value: a change it has not taken
    /// yet is replaced by the next (the last value wins; the final value is never dropped), and
    /// it never gets the value it took last again.
    public func values(coalescing: Bool) -> CoalescedValues<Value> {
        CoalescedValues(stream: coalescing ? valueStream(buffer: 1) : values)
    }

    private func valueStream(buffer: Int) -> AsyncStream<Value> {
        AsyncStream(bufferingPolicy: .bufferingNewest(buffer)) { continuation in
            client.queue.async { [self] in
                nextID += 1
                let id = nextID
                valueSubscribers[id] = continuation
                if let last, let value = Value(dbusValue: last) { continuation.yield(value) }
                continuation.onTermination = { _ in
                    self.client.queue.async { self.valueSubscribers[id] = nil }
                }
            }
        }
    }

    /// The current ``state`` first, then every change of it.
    public var states: AsyncStream<PropertyState> {
        AsyncStream(bufferingPolicy: .bufferingNewest(Self.bufferLimit)) { continuation in
            client.queue.async { [self] in
                nextID += 1
                let id = nextID
                stateSubscribers[id] = continuation
                continuation.yield(confinedState)
                continuation.onTermination = { _ in
                    self.client.queue.async { self.stateSubscribers[id] = nil }
                }
            }
        }
    }

    // MARK: Reading and writing

    /// Reads the value from the daemon now (not the cache).
    public func value() async throws(PropBusClientError) -> Value {
        try await valueWithRevision().value
    }

    /// Reads the value and its revision (`GetWithRevision`), for ``compareAndSet(revision:to:)``.
    public func valueWithRevision() async throws(PropBusClientError) -> (value: Value, revision: UInt64) {
        let (path, name) = try located()
        let reply = try await client.callDaemon(path: path, interface: DaemonNames.valuesInterface,
                                                member: "GetWithRevision", [.string(name)])
        guard reply.count == 2, case .uint64(let revision) = reply[1] else {
            throw PropBusClientError(name: DBusError.Name.failed, message: "GetWithRevision of \(key) replied \(reply)")
        }
        let raw = reply[0].unwrappingVariant
        guard let value = Value(dbusValue: raw) else { throw .decoding(key, expected: Value.dbusType, actual: raw) }
        return (value, revision)
    }

    /// Writes `value` (`Properties.Set`). When it returns, ``current`` already shows it (the
    /// daemon sends its signal before its reply).
    public func set(_ value: Value) async throws(PropBusClientError) {
        let (path, name) = try located()
        try await checkKeyType()
        await readSent()
        _ = try await client.callDaemon(path: path, interface: DaemonNames.propertiesInterface, member: "Set",
                                        [.string(DaemonNames.valuesInterface), .string(name), .variant(value.dbusValue)])
    }

    /// The `Set` of an already encoded value (a channel's), or `nil` for an invalid key.
    func setMessage(_ value: DBusValue) -> Message? {
        guard let location, let message = try? Message.methodCall(destination: DaemonNames.busName, path: location.path,
                                                                   interface: DaemonNames.propertiesInterface, member: "Set"),
              (try? message.append([.string(DaemonNames.valuesInterface), .string(location.name), .variant(value)])) != nil
        else { return nil }
        return message
    }

    /// Writes `value` only if the key's revision is still `revision`; returns the new revision.
    /// A moved revision throws ``PropBusClientError/Name/conflict`` (``PropBusClientError/isConflict``).
    @discardableResult
    public func compareAndSet(revision: UInt64, to value: Value) async throws(PropBusClientError) -> UInt64 {
        let (path, name) = try located()
        try await checkKeyType()
        await readSent()
        let reply = try await client.callDaemon(path: path, interface: DaemonNames.valuesInterface, member: "CompareAndSet",
                                                [.string(name), .uint64(revision), .variant(value.dbusValue)])
        guard case .uint64(let new)? = reply.first else {
            throw PropBusClientError(name: DBusError.Name.failed, message: "CompareAndSet of \(key) replied \(reply)")
        }
        return new
    }

    /// Forgets the stored value, so the key reads its default again.
    public func reset() async throws(PropBusClientError) {
        let (path, name) = try located()
        await readSent()
        _ = try await client.callDaemon(path: path, interface: DaemonNames.valuesInterface, member: "Reset", [.string(name)])
    }

    /// What the client knows of the key's D-Bus type against `Value`'s.
    private enum KeyType: Sendable {
        case matches, unknown
        case differs(String)
    }

    /// Throws `TypeMismatch` for a key whose type is not `Value`'s, as a read does, before
    /// anything is sent (the daemon would answer the standard `InvalidArgs`).
    func checkKeyType() async throws(PropBusClientError) {
        let known: KeyType = await client.onQueue { [self] in
            if case .typeMismatch(_, let actual) = confinedState { return .differs(actual) }
            return last == nil ? .unknown : .matches
        }
        switch known {
        case .matches:
            return
        case .differs(let actual):
            throw PropBusClientError(name: PropBusClientError.Name.typeMismatch,
                                     message: "property \(key) has type '\(actual)'; this Property writes '\(Value.dbusType.signature)'")
        case .unknown:
            // Not read yet: a read says (a key that cannot be read is left to the write's answer).
            do { _ = try await valueWithRevision() } catch where error.name == PropBusClientError.Name.typeMismatch { throw error } catch {}
        }
    }

    /// Returns once no read of the value waits to be sent.
    private func readSent() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            client.queue.async { [self] in
                if readUnsent { readWaiters.append(continuation) } else { continuation.resume() }
            }
        }
    }

    private func releaseWriters() {
        readUnsent = false
        let waiters = readWaiters
        readWaiters = []
        for waiter in waiters { waiter.resume() }
    }

    private func located() throws(PropBusClientError) -> (path: String, name: String) {
        guard let location else {
            throw PropBusClientError(name: "org.propbus.PropBus1.Error.InvalidKey",
                                     message: "'\(key)' is not a key: a key is group.name, e.g. settings.volume")
        }
        return location
    }

    // MARK: Following the daemon (on the client's queue)

    /// Tells `observer` the current wire value (if known) and then every accepted change, on the
    /// client's queue. Returns an id for ``removeObserver(_:)``.
    func addObserver(_ observer: @escaping (DBusValue) -> Void) -> Int {
        dispatchPrecondition(condition: .onQueue(client.queue))
        nextID += 1
        observers[nextID] = observer
        if let last, Value(dbusValue: last) != nil { observer(last) }
        return nextID
    }

    func removeObserver(_ id: Int) {
        dispatchPrecondition(condition: .onQueue(client.queue))
        observers[id] = nil
    }

    func busChanged(_ value: DBusValue) {
        guard !reading else {
            if !readUnsent { changedDuringRead = value }
            return
        }
        accept(value)
    }

    func resync() {
        guard let location else { return }
        generation += 1
        let expected = generation
        reading = true
        readUnsent = true
        changedDuringRead = nil
        Task { [self] in
            // The rule first, then the read: a change between the two is then in a signal
            // that follows the read's answer.
            await client.subscribe(to: location.path)
            client.queue.async { [self] in
                guard expected == generation else { return }
                read(expected, location)
            }
        }
    }

    private func read(_ expected: Int, _ location: (path: String, name: String)) {
        dispatchPrecondition(condition: .onQueue(client.queue))
        let message: Message
        do {
            message = try Message.methodCall(destination: DaemonNames.busName, path: location.path,
                                             interface: DaemonNames.propertiesInterface, member: "Get")
            try message.append([.string(DaemonNames.valuesInterface), .string(location.name)])
        } catch {
            reading = false
            releaseWriters()
            return
        }
        defer { releaseWriters() }
        client.connection.call(message) { [self] result in
            guard expected == generation else { return }
            reading = false
            if let changed = changedDuringRead {
                changedDuringRead = nil
                accept(changed)
                return
            }
            guard case .success(let reply) = result, case .variant(let value)? = try? reply.arguments().first else {
                // The key does not exist (yet), or the daemon went away meanwhile.
                setState(.stale)
                return
            }
            accept(value.unwrappingVariant)
        }
    }

    private func accept(_ value: DBusValue) {
        guard value.type == Value.dbusType, let decoded = Value(dbusValue: value) else {
            last = nil
            snapshot.withLock { $0.value = nil }
            setState(.typeMismatch(expected: Value.dbusType.signature, actual: value.signature))
            return
        }
        if last != value {
            last = value
            snapshot.withLock { $0.value = decoded }
            for continuation in valueSubscribers.values { continuation.yield(decoded) }
            for observer in observers.values { observer(value) }
        }
        setState(.live)
    }

    func daemonVanished() {
        generation += 1
        reading = false
        releaseWriters()
        setState(.stale)
    }

    func finish() {
        daemonVanished()
        for continuation in valueSubscribers.values { continuation.finish() }
        for continuation in stateSubscribers.values { continuation.finish() }
        valueSubscribers = [:]
        stateSubscribers = [:]
    }

    private func setState(_ new: PropertyState) {
        guard new != confinedState else { return }
        confinedState = new
        snapshot.withLock { $0.state = new }
        for continuation in stateSubscribers.values { continuation.yield(new) }
    }
}

/// A property's values for a consumer that only needs the newest (``Property/values(coalescing:)``).
public struct CoalescedValues<Value: DBusValueConvertible>: AsyncSequence, Sendable {
    let stream: AsyncStream<Value>

    public func makeAsyncIterator() -> Iterator {
        Iterator(inner: stream.makeAsyncIterator())
    }

    /// Skips a value equal (as wire bytes) to the one it returned last.
    public struct Iterator: AsyncIteratorProtocol {
        var inner: AsyncStream<Value>.Iterator
        var last: DBusValue?

        public mutating func next() async -> Value? {
            while let value = await inner.next() {
                let wire = value.dbusValue
                if wire == last { continue }
                last = wire
                return value
            }
            return nil
        }
    }
}
