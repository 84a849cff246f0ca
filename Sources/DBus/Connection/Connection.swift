import CDBus
import Dispatch

/// A connection to a message bus, driven by its own serial queue.
///
/// `@unchecked Sendable`: every libdbus call and every mutable field is confined to `queue`.
/// Public methods may be called from any thread; they hop onto `queue` themselves. Callbacks
/// (method calls, signals, round ends) run on `queue`.
public final class Connection: @unchecked Sendable {
    /// The queue that owns this connection.
    public let queue: DispatchQueue
    let raw: OpaquePointer
    private var loop: MainLoop?
    private var signalHandlers: [(id: Int, rule: MatchRule?, handler: (Message) -> Void)] = []
    private var nextHandlerID = 0
    private var roundEndHandlers: [() -> Void] = []
    private var closed = false

    /// The unique name the bus assigned (`:1.42`), known once ``connect(to:queue:)`` returned.
    public private(set) var uniqueName = ""

    /// Receives method calls addressed to this connection; set by an ``ObjectTree``.
    var methodCallHandler: ((Message) -> Void)?

    /// Called on `queue` once, when the connection to the bus is lost; set with
    /// ``whenDisconnected(_:)``.
    public private(set) var onDisconnect: (@Sendable () -> Void)?

    /// Sets what runs (on `queue`, once) when the connection to the bus is lost, replacing any
    /// earlier handler. Call on `queue`: the dispatch round reads the handler there.
    public func whenDisconnected(_ handler: @escaping @Sendable () -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        onDisconnect = handler
    }

    /// Asked after each call of a round: whether the round has produced enough (reply bytes) and
    /// should end, so its replies go out before more work is done. Set by an ``ObjectTree``.
    var roundIsFull: (() -> Bool)?

    /// Calls (and the signals behind them) waiting to be handled, served fairly (``HeldCalls``).
    private var held = HeldCalls()

    /// What the bus holds of this connection's messages, and the bound on it (``BusBacklog``).
    public private(set) lazy var backlog = BusBacklog(connection: self)

    /// The most calls handled in one round.
    static let callsPerRound = 64
    /// The time after which a round stops taking calls (it always takes one): a call that
    /// arrives while a backlog is served waits for about this long, plus its own turn.
    static let roundTimeBudgetNanoseconds: UInt64 = 5_000_000
    /// Held calls from which a round reads ahead in the socket (below it, no extra syscall).
    static let readAheadThreshold = 4
    /// Rounds that served no calls because too much output was waiting (a test's count).
    private(set) var roundsHeldForOutput = 0

    /// Bytes waiting in libdbus's outgoing queue above which a round serves no calls: their
    /// replies would only wait there, in memory. A client that pipelines big calls and reads
    /// slowly otherwise grows the queue without bound once replies are cheap to build (80 MB in
    /// `bench/fairness.sh`), and every other client's reply waits behind all of it. The calls
    /// stay held, and the first I/O event that drains the queue below this runs the next round.
    var maximumQueuedOutput = 256 << 10  // a variable for tests; set on the queue


    static let threadsInitialized: Bool = {
        // Must precede every other libdbus call in the process.
        dbus_threads_init_default() != 0
    }()

    /// Opens a private connection (`dbus_connection_open_private`) and registers with the bus.
    ///
    /// The `Hello` call is asynchronous, so no thread blocks on the bus.
    public static func connect(to bus: BusAddress, queue: DispatchQueue? = nil) async throws(DBusError) -> Connection {
        let queue = queue ?? DispatchQueue(label: "DBus.Connection")
        let opened: Result<Connection, DBusError> = await withCheckedContinuation { continuation in
            queue.async {
                continuation.resume(returning: Result { () throws(DBusError) in try Connection(bus: bus, queue: queue) })
            }
        }
        let connection = try opened.get()
        try await connection.hello()
        return connection
    }

    /// Opens the connection on `queue` without registering; ``hello()`` must follow.
    private init(bus: BusAddress, queue: DispatchQueue) throws(DBusError) {
        dispatchPrecondition(condition: .onQueue(queue))
        _ = Self.threadsInitialized
        let address = try bus.resolved()
        var error = CError()
        guard let raw = dbus_connection_open_private(address, &error.raw) else {
            throw error.take(default: "cannot connect to \(address)")
        }
        self.raw = raw
        self.queue = queue
        markQueue()
        // Otherwise libdbus calls _exit(1) when the bus goes away.
        dbus_connection_set_exit_on_disconnect(raw, 0)
        let data = Unmanaged.passUnretained(self).toOpaque()
        dbus_connection_add_filter(raw, Self.filterFunction, data, nil)
        let loop = MainLoop(connection: raw, queue: queue) { [weak self] status in self?.dispatchRound(knownStatus: status) }
        loop.install()
        self.loop = loop
    }

    deinit {
        // Detach every callback first: libdbus may call them while closing, after `self` is gone.
        dbus_connection_set_dispatch_status_function(raw, nil, nil, nil)
        dbus_connection_remove_filter(raw, Self.filterFunction, Unmanaged.passUnretained(self).toOpaque())
        if !closed { dbus_connection_close(raw) }
        dbus_connection_set_watch_functions(raw, nil, nil, nil, nil, nil)
        dbus_connection_set_timeout_functions(raw, nil, nil, nil, nil, nil)
        loop?.stop()
        dbus_connection_unref(raw)
    }

    private func hello() async throws(DBusError) {
        let reply = try await call(Message.methodCall(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                                      interface: "org.freedesktop.DBus", member: "Hello"))
        guard let name = try reply.arguments().first?.stringValue else {
            throw DBusError.failed("Hello returned no unique name")
        }
        await onQueue { dbus_bus_set_unique_name(self.raw, name); self.uniqueName = name }
    }

    /// Runs `body` on the queue and waits for it without blocking a thread.
    private func onQueue<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in queue.async { continuation.resume(returning: body()) } }
    }

    /// Closes the connection (`dbus_connection_close`).
    public func close() {
        queue.async { [self] in
            guard !closed else { return }
            closed = true
            dbus_connection_flush(raw)
            dbus_connection_close(raw)
        }
    }

    /// Writes everything queued for sending, blocking the queue briefly; for shutdown.
    public func flush() {
        queue.sync { if !closed { dbus_connection_flush(raw) } }
    }

    // MARK: Dispatch

    /// Processes every message that is ready, then lets round-end handlers flush what the
    /// round produced (coalesced signals, group commits). `knownStatus` is the dispatch status
    /// the caller has just read, so it is not asked for again (each read takes libdbus's lock).
    private func dispatchRound(knownStatus: DBusDispatchStatus?) {
        // The status the last dispatch returned. Not asked again at the end of the round: a
        // change after it (nothing in a round reads the socket) reaches the dispatch-status
        // function, which schedules the next round itself.
        var status = takeIn(from: knownStatus ?? dbus_connection_get_dispatch_status(raw))
        if held.count >= Self.readAheadThreshold {
            // A backlog. libdbus reads 2 kB per I/O event, so another client's call sits in the
            // socket behind the whole backlog: read what the socket holds now (without
            // blocking), so every sender's waiting calls get their turn in the next rounds.
            while held.count < HeldCalls.maximum, dbus_connection_read_write(raw, 0) != 0 {
                status = dbus_connection_get_dispatch_status(raw)
                guard status == DBUS_DISPATCH_DATA_REMAINS else { break }
                status = takeIn(from: status)
            }
        }
        // Serve the senders in turn, within the round's budget, unless the replies already
        // waiting to be sent are enough (see maximumQueuedOutput).
        let outputBacklog = held.count > 0 && Int(dbus_connection_get_outgoing_size(raw)) >= maximumQueuedOutput
        if !outputBacklog {
            var served = 0
            let deadline = DispatchTime.now().uptimeNanoseconds + Self.roundTimeBudgetNanoseconds
            while served < Self.callsPerRound, let message = held.nextCall() {
                methodCallHandler?(message)
                served += 1
                if roundIsFull?() == true || DispatchTime.now().uptimeNanoseconds >= deadline { break }
            }
        }
        for signal in held.deliverableSignals() { deliverSignal(signal) }
        for handler in roundEndHandlers { handler() }
        if outputBacklog {
            // Not another round now (it would spin): the write that drains the queue runs it.
            roundsHeldForOutput += 1
            loop?.resumeWhenOutput(below: maximumQueuedOutput)
        } else if held.count > 0 || held.holdsSignals || status == DBUS_DISPATCH_DATA_REMAINS {
            // More to do: another round, queued behind whatever else waits for the queue (I/O,
            // timers), so the replies of this one go out first.
            loop?.scheduleDispatch()
        }
    }

    /// Takes in every message libdbus has read, up to the held-call bound (replies to our own
    /// calls complete and signals are delivered here too), starting from the current dispatch
    /// `status`; returns the status after the last dispatch.
    private func takeIn(from status: DBusDispatchStatus) -> DBusDispatchStatus {
        // dbus_connection_dispatch returns the status after it: asking again would take the
        // connection's lock once more per message.
        var status = status
        while held.count < HeldCalls.maximum, status == DBUS_DISPATCH_DATA_REMAINS {
            status = dbus_connection_dispatch(raw)
        }
        return status
    }

    private func deliverSignal(_ message: Message) {
        for entry in signalHandlers where entry.rule?.matches(message) ?? true {
            entry.handler(message)
        }
        message.closeReceivedFDs()
    }

    /// Registers work to run at the end of every dispatch round, on `queue`.
    public func addRoundEndHandler(_ handler: @escaping () -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        roundEndHandlers.append(handler)
    }

    /// Asks for a dispatch round soon, e.g. after work produced outside of one.
    public func scheduleRound() {
        queue.async { [self] in loop?.scheduleDispatch() }
    }

    /// The one filter function; removal matches it by pointer and data.
    private static let filterFunction: DBusHandleMessageFunction = { _, message, data in
        let connection = Unmanaged<Connection>.fromOpaque(data!).takeUnretainedValue()
        return connection.filter(Message(retaining: message!))
    }

    private func filter(_ message: Message) -> DBusHandlerResult {
        switch message.kind {
        case .methodCall:
            if methodCallHandler != nil {
                held.hold(message)
            } else if !message.noReply, let reply = message.makeError(.unknownObject("no objects are exported on this connection")) {
                send(reply)
            }
            return DBUS_HANDLER_RESULT_HANDLED
        case .signal:
            if message.isSignal("org.freedesktop.DBus.Local", "Disconnected") {
                closed = true
                onDisconnect?()
                return DBUS_HANDLER_RESULT_HANDLED
            }
            if !held.holdSignal(message) { deliverSignal(message) }
            return DBUS_HANDLER_RESULT_NOT_YET_HANDLED
        default:
            return DBUS_HANDLER_RESULT_NOT_YET_HANDLED
        }
    }

    // MARK: Sending

    /// Queues a message for sending (`dbus_connection_send`). Safe from any thread.
    public func send(_ message: Message) {
        if DispatchQueue.getSpecific(key: QueueKey.key) == ObjectIdentifier(self) {
            sendObserver?(message)
            dbus_connection_send(raw, message.raw, nil)
        } else {
            queue.async { [self] in
                sendObserver?(message)
                _ = dbus_connection_send(raw, message.raw, nil)
            }
        }
    }

    /// A test hook: sees every message ``send(_:)`` hands to libdbus, on `queue`.
    ///
    /// The bus drops replies nobody asked for before any monitor sees them, so what a service
    /// answers to a NO_REPLY_EXPECTED call can only be checked at the sender.
    var sendObserver: ((Message) -> Void)?

    /// Sends a method call and delivers the reply (or error) on `queue`.
    ///
    /// Uses `dbus_connection_send_with_reply` and a pending-call notify: nothing blocks.
    public func call(_ message: Message, timeoutMilliseconds: Int32 = -1,
                     completion: @escaping (Result<Message, DBusError>) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        var pending: OpaquePointer? = nil
        guard dbus_connection_send_with_reply(raw, message.raw, &pending, timeoutMilliseconds) != 0, let pending else {
            completion(.failure(DBusError(name: DBusError.Name.disconnected, message: "not connected to the bus")))
            return
        }
        let box = PendingReply(completion)
        dbus_pending_call_set_notify(pending, { pending, data in
            let box = Unmanaged<PendingReply>.fromOpaque(data!).takeUnretainedValue()
            let reply = dbus_pending_call_steal_reply(pending)
            dbus_pending_call_unref(pending)
            box.complete(reply.map { Message(owning: $0) })
        }, Unmanaged.passRetained(box).toOpaque(), { Unmanaged<PendingReply>.fromOpaque($0!).release() })
        // The notify is set on the queue that dispatches, so the reply cannot slip in between;
        // this only guards against a call that completed synchronously (disconnection).
        if dbus_pending_call_get_completed(pending) != 0, !box.done {
            let reply = dbus_pending_call_steal_reply(pending)
            dbus_pending_call_unref(pending)
            box.complete(reply.map { Message(owning: $0) })
        }
    }

    /// Sends a method call and waits for its reply without blocking a thread.
    /// An error reply is thrown as ``DBusError``.
    public func call(_ message: Message, timeoutMilliseconds: Int32 = -1) async throws(DBusError) -> Message {
        let result: Result<Message, DBusError> = await withCheckedContinuation { continuation in
            queue.async { [self] in
                call(message, timeoutMilliseconds: timeoutMilliseconds) { continuation.resume(returning: $0) }
            }
        }
        return try result.get()
    }

    /// Calls a method and returns its decoded reply arguments.
    public func call(destination: String, path: String, interface: String, member: String,
                     arguments: [DBusValue] = [], timeoutMilliseconds: Int32 = -1) async throws(DBusError) -> [DBusValue] {
        let message = try Message.methodCall(destination: destination, path: path, interface: interface, member: member)
        try message.append(arguments)
        return try await call(message, timeoutMilliseconds: timeoutMilliseconds).arguments()
    }

    // MARK: Signals

    /// Registers a handler for received signals matching `rule` (all signals when `nil`).
    /// Handlers run on `queue`. This does not subscribe on the bus: see ``addMatch(_:)``.
    @discardableResult
    public func addSignalHandler(matching rule: MatchRule?, _ handler: @escaping (Message) -> Void) -> Int {
        dispatchPrecondition(condition: .onQueue(queue))
        nextHandlerID += 1
        signalHandlers.append((nextHandlerID, rule, handler))
        return nextHandlerID
    }

    /// Removes a handler registered with ``addSignalHandler(matching:_:)``.
    public func removeSignalHandler(_ id: Int) {
        dispatchPrecondition(condition: .onQueue(queue))
        signalHandlers.removeAll { $0.id == id }
    }

    /// Subscribes on the bus (`org.freedesktop.DBus.AddMatch`) and waits for the bus to confirm,
    /// so a read made afterwards cannot miss a signal.
    public func addMatch(_ rule: MatchRule) async throws(DBusError) {
        _ = try await callBus("AddMatch", [.string(rule.text)])
    }

    /// Calls a method of the bus itself (`org.freedesktop.DBus`).
    public func callBus(_ member: String, _ arguments: [DBusValue]) async throws(DBusError) -> [DBusValue] {
        try await call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                       interface: "org.freedesktop.DBus", member: member, arguments: arguments)
    }

    // MARK: Names

    /// The reply to `RequestName`.
    public enum RequestNameReply: UInt32, Sendable {
        case primaryOwner = 1, inQueue = 2, exists = 3, alreadyOwner = 4
    }

    /// Requests a well-known name (`org.freedesktop.DBus.RequestName`), refusing to queue.
    public func requestName(_ name: String, replaceExisting: Bool = false) async throws(DBusError) -> RequestNameReply {
        try Validation.check(busName: name)
        // DBUS_NAME_FLAG_DO_NOT_QUEUE (4), plus REPLACE_EXISTING (2) on request.
        let flags: UInt32 = 4 | (replaceExisting ? 2 : 0)
        let reply = try await callBus("RequestName", [.string(name), .uint32(flags)])
        guard case .uint32(let code)? = reply.first, let result = RequestNameReply(rawValue: code) else {
            throw DBusError.failed("unexpected RequestName reply")
        }
        return result
    }

    /// Runs `body` now when already on `queue`, else queues it there.
    func onQueueOrAsync(_ body: @escaping @Sendable () -> Void) {
        if DispatchQueue.getSpecific(key: QueueKey.key) == ObjectIdentifier(self) { body() } else { queue.async(execute: body) }
    }

    /// Marks the queue so ``send(_:)`` can tell whether it already runs there.
    func markQueue() {
        queue.setSpecific(key: QueueKey.key, value: ObjectIdentifier(self))
    }
}

private enum QueueKey {
    static let key = DispatchSpecificKey<ObjectIdentifier>()
}

/// A pending call's completion, kept alive by libdbus until the call is freed.
private final class PendingReply {
    private var completion: ((Result<Message, DBusError>) -> Void)?
    var done: Bool { completion == nil }

    init(_ completion: @escaping (Result<Message, DBusError>) -> Void) { self.completion = completion }

    func complete(_ reply: Message?) {
        guard let completion else { return }
        self.completion = nil
        guard let reply else {
            completion(.failure(DBusError(name: DBusError.Name.noReply, message: "no reply")))
            return
        }
        if let error = reply.error { completion(.failure(error)) } else { completion(.success(reply)) }
    }
}

/// A C `DBusError` on the stack, turned into a Swift ``DBusError`` at once.
struct CError: ~Copyable {
    var raw = CDBus.DBusError()

    init() { dbus_error_init(&raw) }

    mutating func take(default message: String) -> DBusError {
        defer { dbus_error_free(&raw) }
        guard dbus_error_is_set(&raw) != 0 else { return .failed(message) }
        return DBusError(name: raw.name.map { String(cString: $0) } ?? DBusError.Name.failed,
                         message: raw.message.map { String(cString: $0) } ?? message)
    }

}
