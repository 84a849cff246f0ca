import DBus
import Dispatch
import Observation

/// The seeds' `RACChannel` between a daemon key and a model property, across processes.
///
/// Made by ``PropBusClient/channel(_:)``; ``bind(_:of:)`` connects an `@Observable` model's
/// property to the key both ways:
///
/// - at the start the key's value wins (the model shows what the daemon holds);
/// - a model write sends exactly one `Set`, a write of the value the model already shows none;
/// - a change on the bus updates the model exactly once and sends nothing back;
/// - while the model's own writes are on their way, bus changes wait: once the daemon answered
///   the last of them, the model is given the daemon's value if it differs from the model's.
///   Neither side keeps a stale value after changes interleaved from both sides (the seeds'
///   defaults channel, whose `distinctUntilChanged` remembered a value the model no longer
///   showed, so a change made elsewhere never reached the switch).
///
/// Writes made in one main-actor turn are one change (Observation reports the first, the
/// channel then sends the value the model holds). ``ChannelBinding/state`` says whether writes
/// go through; ``ChannelBinding/committed()`` waits until they have.
public final class PropertyChannel<Value: DBusValueConvertible>: Sendable {
    /// The key's terminal.
    public let property: Property<Value>

    init(property: Property<Value>) {
        self.property = property
    }

    /// Binds `keyPath` of `model` to the key both ways; the binding lasts until the returned
    /// value is cancelled or released.
    @MainActor
    public func bind<Model: Observable & AnyObject & SendableMetatype>(_ keyPath: ReferenceWritableKeyPath<Model, Value>,
                                                    of model: Model) -> ChannelBinding where Value: Equatable & SendableMetatype {
        bind(keyPath, of: model, toBus: { $0 }, fromBus: { $0 })
    }

    /// Binds `keyPath` of `model` to the key both ways through transforms: `fromBus` turns the
    /// key's value into the model's, `toBus` the model's into the key's (as `Bind`'s
    /// `from_key` and `to_key`).
    @MainActor
    public func bind<Model: Observable & AnyObject & SendableMetatype, ModelValue: Equatable & SendableMetatype>(
        _ keyPath: ReferenceWritableKeyPath<Model, ModelValue>, of model: Model,
        toBus: @escaping @MainActor (ModelValue) -> Value, fromBus: @escaping @MainActor (Value) -> ModelValue
    ) -> ChannelBinding {
        let endpoint = ChannelEndpoint(property: property)
        let binding = ModelTerminal(endpoint: endpoint, model: model, keyPath: keyPath, toBus: toBus, fromBus: fromBus)
        binding.start()
        return ChannelBinding(client: property.client, endpoint: endpoint, cancel: { binding.cancel() })
    }
}

/// A live binding (two-way, ``PropertyChannel``, or one-way, `model.bind(_:to:)`); cancelled
/// when released.
@MainActor
public final class ChannelBinding {
    private let cancelBody: @MainActor () -> Void
    private let client: PropBusClient?
    private let endpoint: (any BindingStateSource)?
    private var cancelled = false

    init(client: PropBusClient?, endpoint: (any BindingStateSource)?, cancel: @escaping @MainActor () -> Void) {
        self.client = client
        self.endpoint = endpoint
        cancelBody = cancel
    }

    /// Whether the binding's writes go through: live, stale, refused (why), overridden (by
    /// whom), read-only or locked. A one-way binding writes nothing and is always live.
    public var state: BindingState { endpoint?.state ?? .live }

    /// The current ``state`` first, then every change of it (e.g. a control's `isEnabled`
    /// follows `state.isWritable`).
    public var states: AsyncStream<BindingState> {
        endpoint?.states ?? AsyncStream { $0.yield(.live); $0.finish() }
    }

    /// Waits until the model writes made so far have been answered by the daemon (committed,
    /// or refused and the daemon's value given back): a command run afterwards sees them.
    /// ``Command/execute(_:)`` does this by itself.
    public func committed() async {
        await client?.commitBoundWrites()
    }

    /// Stops the binding: neither side follows the other any more.
    public func cancel() {
        guard !cancelled else { return }
        cancelled = true
        cancelBody()
    }

    isolated deinit {
        cancel()
    }
}

/// Who tells a ``ChannelBinding`` its state.
protocol BindingStateSource: Sendable {
    var state: BindingState { get }
    var states: AsyncStream<BindingState> { get }
}

/// The key's side of a binding, on the client's queue: what the bus holds, which of the
/// model's writes are still on their way, and which value the model was last given or wrote.
final class ChannelEndpoint<Value: DBusValueConvertible>: @unchecked Sendable, BindingStateSource {
    // Safety: every mutable field is confined to the client's queue (the state's snapshot is
    // behind its lock); the channel's task holds it only to hand values over to that queue.
    let property: Property<Value>
    private var client: PropBusClient { property.client }
    private var queue: DispatchQueue { property.client.queue }
    /// The daemon's latest value (from the property's signals).
    private var busValue: DBusValue?
    /// The value the model shows, as the endpoint knows it: the last it was given or wrote.
    private var modelValue: DBusValue?
    /// The model's `Set`s not answered yet.
    private var pendingSets = 0
    /// The number of the model's last write the endpoint has seen.
    private var lastWrite = 0
    private var observer: Int?
    private var lockListener: Int?
    private var toModel: AsyncStream<Delivery>.Continuation?
    private let snapshot = Locked<BindingState>(.stale)
    private var stateSubscribers: [Int: AsyncStream<BindingState>.Continuation] = [:]
    private var nextSubscriber = 0
    /// Bumped by every metadata read, so an older read's answer is ignored.
    private var metadataGeneration = 0

    /// A value the model must take, decided when the endpoint had seen the model's write
    /// `afterWrite`: the model ignores it if it wrote again since (that write settles anew).
    struct Delivery: Sendable {
        var value: DBusValue
        var afterWrite: Int
    }

    init(property: Property<Value>) {
        self.property = property
    }

    var state: BindingState { snapshot.withLock { $0 } }

    var states: AsyncStream<BindingState> {
        AsyncStream(bufferingPolicy: .bufferingNewest(Property<Value>.bufferLimit)) { continuation in
            queue.async { [self] in
                nextSubscriber += 1
                let id = nextSubscriber
                stateSubscribers[id] = continuation
                continuation.yield(state)
                continuation.onTermination = { _ in self.queue.async { self.stateSubscribers[id] = nil } }
            }
        }
    }

    /// Starts following the key; the values the model must take arrive on the returned stream,
    /// in order.
    func start() -> AsyncStream<Delivery> {
        let (stream, continuation) = AsyncStream<Delivery>.makeStream(bufferingPolicy: .bufferingNewest(Property<Value>.bufferLimit))
        queue.async { [self] in
            toModel = continuation
            observer = property.addObserver { [weak self] value in
                guard let self else { return }
                self.busValue = value
                // An override's end, a daemon back: what the metadata says may have changed.
                if case .overridden = state { readMetadata() } else if case .stale = state { readMetadata() }
                self.settle()
            }
            let key = property.key
            lockListener = client.addLockListener { [weak self] keys in
                if keys.isEmpty || keys.contains(key) { self?.readMetadata() }
            }
            readMetadata()
        }
        return stream
    }

    /// Sends the model's write number `write`: one `Set`.
    func send(_ value: DBusValue, write: Int) {
        queue.async { [self] in
            guard toModel != nil else { return }
            lastWrite = write
            pendingSets += 1
            modelValue = value
            // Sent from the queue in order (a task per write could reorder them); an error (out
            // of range, read-only, daemon away) is settled like any answer: the model then gets
            // the daemon's value back, and the state says why.
            guard let message = property.setMessage(value) else { pendingSets -= 1; settle(); return }
            client.boundWrites.sent()
            client.connection.call(message) { [self] result in
                pendingSets -= 1
                switch result {
                case .failure(let error):
                    setState(BindingState(refusal: PropBusClientError(error)))
                case .success(let reply):
                    if let error = reply.error {
                        setState(BindingState(refusal: PropBusClientError(error)))
                    } else if state != .live || busValue != value {
                        // Accepted but not shown (an override above the user's value), or the
                        // first write after a refusal: the metadata says which.
                        readMetadata()
                    }
                }
                settle()
                client.boundWrites.answered()
            }
        }
    }

    /// Gives the model the daemon's value once none of its own writes is on its way.
    private func settle() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard pendingSets == 0, let busValue, busValue != modelValue else { return }
        modelValue = busValue
        toModel?.yield(Delivery(value: busValue, afterWrite: lastWrite))
    }

    /// Reads the key's metadata for this caller (`ListProperties`): writable, locked, layer.
    private func readMetadata() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard toModel != nil else { return }
        metadataGeneration += 1
        let generation = metadataGeneration, key = property.key
        Task { [self] in
            let reply = try? await client.callDaemon(path: DaemonNames.rootPath, interface: DaemonNames.managerInterface,
                                                     member: "ListProperties", [.string(key)])
            let metadata = Self.metadata(of: key, in: reply)
            queue.async { [self] in
                guard generation == metadataGeneration else { return }
                setState(metadata.map { BindingState(metadata: $0) } ?? .stale)
            }
        }
    }

    /// The metadata of `key` in a `ListProperties` reply (`a(ssva{sv})`), which lists every
    /// key starting with the prefix.
    private static func metadata(of key: String, in reply: [DBusValue]?) -> [String: DBusValue]? {
        guard case .array(_, let rows)? = reply?.first else { return nil }
        for row in rows {
            guard let fields = row.structureFields(count: 4), fields[0].stringValue == key else { continue }
            return fields[3].stringKeyedEntries
        }
        return nil
    }

    private func setState(_ new: BindingState) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard snapshot.withLock({ state in
            guard state != new else { return false }
            state = new
            return true
        }) else { return }
        for subscriber in stateSubscribers.values { subscriber.yield(new) }
    }

    func cancel() {
        queue.async { [self] in
            if let observer { property.removeObserver(observer) }
            if let lockListener { client.removeLockListener(lockListener) }
            observer = nil
            lockListener = nil
            toModel?.finish()
            toModel = nil
            for subscriber in stateSubscribers.values { subscriber.finish() }
            stateSubscribers = [:]
        }
    }
}

/// The model's side of a binding, on the main actor.
@MainActor
final class ModelTerminal<Model: AnyObject & Observable & SendableMetatype, ModelValue: Equatable & SendableMetatype,
                          Value: DBusValueConvertible> {
    private let endpoint: ChannelEndpoint<Value>
    private weak var model: Model?
    private let keyPath: ReferenceWritableKeyPath<Model, ModelValue>
    private let toBus: @MainActor (ModelValue) -> Value
    private let fromBus: @MainActor (Value) -> ModelValue
    /// The value the model and the key last agreed on: a model value equal to it is no write.
    private var synced: ModelValue?
    /// The model's writes sent so far.
    private var writes = 0
    private var following: Task<Void, Never>?
    private var active = true

    init(endpoint: ChannelEndpoint<Value>, model: Model, keyPath: ReferenceWritableKeyPath<Model, ModelValue>,
         toBus: @escaping @MainActor (ModelValue) -> Value, fromBus: @escaping @MainActor (Value) -> ModelValue) {
        self.endpoint = endpoint
        self.model = model
        self.keyPath = keyPath
        self.toBus = toBus
        self.fromBus = fromBus
    }

    func start() {
        // What the model shows now: a write the model makes before the key's value arrives
        // differs from it, so that value does not overwrite the write.
        synced = model?[keyPath: keyPath]
        let incoming = endpoint.start()
        // One task takes the bus's values in order (separate tasks would not keep it).
        following = Task { @MainActor [weak self] in
            for await value in incoming {
                guard let self else { return }
                self.apply(value)
            }
        }
        endpoint.property.client.boundModels.add(self) { [weak self] in self?.modelChanged() }
        track()
    }

    func cancel() {
        active = false
        following?.cancel()
        endpoint.cancel()
        endpoint.property.client.boundModels.remove(self)
    }

    private func apply(_ delivery: ChannelEndpoint<Value>.Delivery) {
        guard active, let model, let value = Value(dbusValue: delivery.value) else { return }
        // Decided before the endpoint saw the model's last write: that write's answer settles anew.
        guard delivery.afterWrite == writes else { return }
        let current = model[keyPath: keyPath]
        // A model write not sent yet (its observation task has not run): it goes out next and
        // the daemon's answer settles the rest.
        if current != synced { return }
        let new = fromBus(value)
        synced = new
        if current != new { model[keyPath: keyPath] = new }
    }

    private func track() {
        guard active, let model else { return }
        withObservationTracking {
            _ = model[keyPath: keyPath]
        } onChange: { [weak self] in
            // Called before the write lands: read the value on the next main-actor turn.
            Task { @MainActor [weak self] in
                guard let self else { return }
                self.modelChanged()
                self.track()
            }
        }
    }

    /// Sends the model's value if it is a write not sent yet.
    private func modelChanged() {
        guard active, let model else { return }
        let value = model[keyPath: keyPath]
        guard value != synced else { return }
        synced = value
        writes += 1
        endpoint.send(toBus(value).dbusValue, write: writes)
    }
}
