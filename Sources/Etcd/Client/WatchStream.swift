import CCurl
import Glibc
import JSON
import Synchronization

/// A running watch: one long-lived `/v3/watch` request on a thread of its own.
///
/// The thread runs a libcurl multi handle (so ``cancel()`` can wake it at once with
/// `curl_multi_wakeup`), splits the chunked response into its lines (one JSON watch response
/// each) and calls the handler with a ``WatchUpdate`` per line, in order. It sends
/// `Grpc-Metadata-hasleader: true`, so a member cut off from the quorum ends the stream with an
/// error instead of going silent; the stream then reconnects to the next endpoint and resumes
/// after the last revision it delivered.
///
/// Dropping the last reference cancels the stream.
public final class WatchStream: Sendable {
    private let runner: WatchRunner

    init(client: EtcdClient, key: [UInt8], rangeEnd: [UInt8]?, fromRevision: Int64,
         onUpdate: @escaping @Sendable (WatchUpdate) -> Void) {
        runner = WatchRunner(client: client, key: key, rangeEnd: rangeEnd, fromRevision: fromRevision, onUpdate: onUpdate)
        runner.start()
    }

    deinit {
        runner.cancel()
    }

    /// Stops the watch. When called from outside the handler, it returns after the stream's
    /// thread has ended: no update is delivered after it.
    public func cancel() {
        runner.cancel()
    }

    /// The revision the stream would resume from: one after the last delivered change or
    /// progress notification.
    public var nextRevision: Int64 { runner.nextRevision }
}

/// The state and thread behind a ``WatchStream``.
///
/// Ownership: the stream's thread alone touches `lineBuffer`, `endpointIndex`, `finished`,
/// `currentEndpoint`, `pendingError`, `failuresInARow` and its easy handle. The cancel flag, the
/// cursor (`next`) and the thread id are in `shared`, behind its `Mutex`, because
/// ``WatchStream/cancel()`` and ``WatchStream/nextRevision`` read them from other threads.
/// `multi` is created in `init` and freed by the thread at its end under the same lock, so
/// `curl_multi_wakeup` (thread-safe in libcurl) is never called on a freed handle.
final class WatchRunner: @unchecked Sendable {
    // Safety: the ownership above: the thread's fields are touched by the stream's thread only,
    // the rest by other threads only through `shared`'s mutex or as immutable `let`s.
    private struct Shared {
        var cancelled = false
        var next: Int64
        var multiAlive = true
        var thread: pthread_t?
        var joined = false
    }

    private let client: EtcdClient
    private let key: [UInt8]
    private let rangeEnd: [UInt8]?
    private let onUpdate: @Sendable (WatchUpdate) -> Void
    private let multi: UnsafeMutableRawPointer
    private let shared: Mutex<Shared>

    // Confined to the stream's thread.
    private var lineBuffer: [UInt8] = []
    private var endpointIndex = 0
    private var finished = false
    private var currentEndpoint = ""
    /// An error line of the current transfer, reported when the transfer ends.
    private var pendingError: EtcdError?
    /// Reconnections since a watch was last created.
    private var failuresInARow = 0
    /// Whether the current transfer still waits for etcd's `created` answer.
    private var awaitingCreated = false

    init(client: EtcdClient, key: [UInt8], rangeEnd: [UInt8]?, fromRevision: Int64,
         onUpdate: @escaping @Sendable (WatchUpdate) -> Void) {
        self.client = client
        self.key = key
        self.rangeEnd = rangeEnd
        self.onUpdate = onUpdate
        multi = LibCurl.api.multiInit()!
        shared = Mutex(Shared(next: fromRevision))
        endpointIndex = client.preferredEndpoint
    }

    var nextRevision: Int64 { shared.withLock { $0.next } }

    private var isCancelled: Bool { shared.withLock { $0.cancelled } }

    func start() {
        // A plain pthread, as WatchPoller's: nothing of Foundation is needed. The thread holds
        // the runner until it ends.
        var thread = pthread_t()
        let box = Unmanaged.passRetained(self).toOpaque()
        pthread_create(&thread, nil, { raw in
            let runner = Unmanaged<WatchRunner>.fromOpaque(raw!).takeRetainedValue()
            runner.run()
            return nil
        }, box)
        shared.withLock { $0.thread = thread }
    }

    func cancel() {
        let thread: pthread_t? = shared.withLock { state in
            state.cancelled = true
            if state.multiAlive { _ = LibCurl.api.multiWakeup(multi) }
            guard !state.joined, let thread = state.thread else { return nil }
            // The handler may cancel its own stream: its thread cannot wait for itself.
            if pthread_equal(thread, pthread_self()) != 0 { return nil }
            state.joined = true
            return thread
        }
        if let thread { pthread_join(thread, nil) }
    }

    private func run() {
        defer {
            shared.withLock { state in
                state.multiAlive = false
                _ = LibCurl.api.multiCleanup(multi)
                // Nobody will join a thread that ends by itself or cancels itself.
                if !state.joined, let thread = state.thread {
                    state.joined = true
                    pthread_detach(thread)
                }
            }
        }
        let handle: CurlEasy
        do {
            handle = try CurlEasy(options: client.options)
        } catch {
            onUpdate(.failed(error))
            return
        }
        var renewToken = false
        while !isCancelled && !finished {
            let outcome = transfer(handle, renewToken: renewToken)
            renewToken = false
            if isCancelled || finished { break }
            if let outcome {
                if outcome.grpcCode == EtcdError.GRPCStatus.unauthenticated { renewToken = true }
                onUpdate(.interrupted(outcome))
            }
            endpointIndex = (endpointIndex + 1) % client.endpoints.count
            // Back off while no member takes the watch (doubling up to 16 times the delay), so
            // a fleet of daemons does not hammer a cluster that is coming back.
            failuresInARow += 1
            let delay = client.options.watchRetryDelay * (1 << min(failuresInARow - 1, 4))
            // The pause is a poll on the multi handle, so cancel() ends it at once.
            var ignored: Int32 = 0
            _ = LibCurl.api.multiPoll(multi, nil, 0, Int32(CurlEasy.milliseconds(delay)), &ignored)
        }
    }

    /// One watch request on the current endpoint, until it ends; returns why, or nil when it
    /// ended by cancellation or by a final update already delivered.
    private func transfer(_ handle: CurlEasy, renewToken: Bool) -> EtcdError? {
        currentEndpoint = client.endpoints[endpointIndex]
        let token: String?
        do {
            token = try client.token(renew: renewToken)
        } catch {
            return error
        }
        var request: [(String, JSONValue)] = [("key", .bytes(key))]
        if let rangeEnd { request.append(("range_end", .bytes(rangeEnd))) }
        let next = shared.withLock { $0.next }
        if next > 0 { request.append(("start_revision", .int64(next))) }
        if client.options.progressNotify { request.append(("progress_notify", .bool(true))) }
        lineBuffer.removeAll(keepingCapacity: true)
        pendingError = nil
        awaitingCreated = true
        let clock = ContinuousClock()
        let started = clock.now
        let unmanaged = Unmanaged.passUnretained(self)
        handle.prepare(url: currentEndpoint + "/v3/watch", body: JSONValue.object([("create_request", .object(request))]).text,
                       token: token, extraHeaders: ["Grpc-Metadata-hasleader: true"], timeout: nil,
                       connectTimeout: client.options.connectTimeout,
                       receive: WatchRunner.receive, sink: unmanaged.toOpaque())
        _ = LibCurl.api.multiAddHandle(multi, handle.handle)
        defer { _ = LibCurl.api.multiRemoveHandle(multi, handle.handle) }
        var running: Int32 = 1
        while running > 0 {
            guard LibCurl.api.multiPerform(multi, &running) == CURLM_OK else { break }
            if running == 0 || isCancelled || finished || pendingError != nil { break }
            // A request that connected while the member was coming back (a restore, a restart)
            // can sit unanswered for good: no created within the request timeout, try again.
            if awaitingCreated, clock.now - started > client.options.requestTimeout {
                client.forgetToken()
                pendingError = EtcdError(.timedOut, "etcd at \(currentEndpoint) did not confirm the watch within \(client.options.requestTimeout)",
                                         endpoints: [currentEndpoint])
                break
            }
            var ignored: Int32 = 0
            _ = LibCurl.api.multiPoll(multi, nil, 0, 1000, &ignored)
        }
        if isCancelled || finished { return nil }
        // etcd keeps the stream open after an error line (a cancelled watch): reconnect.
        if let error = pendingError { return error }
        var result = CURLE_OK
        var pending: Int32 = 0
        while let message = LibCurl.api.multiInfoRead(multi, &pending) {
            if message.pointee.msg == CURLMSG_DONE { result = message.pointee.data.result }
        }
        if result != CURLE_OK {
            return EtcdError(.unavailable, "etcd watch on \(currentEndpoint) broke: \(handle.failureText(result))",
                             endpoints: [currentEndpoint])
        }
        // A whole response without a final update: an HTTP error body (already parsed as a line
        // if it was JSON), or the member closed the stream.
        if !lineBuffer.isEmpty { handleLine(lineBuffer) }
        if let error = pendingError { pendingError = nil; return error }
        return EtcdError(.unavailable, "etcd at \(currentEndpoint) ended the watch stream (HTTP \(handle.responseCode))",
                         endpoints: [currentEndpoint])
    }

    static let receive: pb_curl_data_callback = { data, size, count, user in
        let runner = Unmanaged<WatchRunner>.fromOpaque(user!).takeUnretainedValue()
        let length = size * count
        guard let data else { return length }
        runner.receive(UnsafeRawBufferPointer(start: data, count: length))
        // Returning less than `length` aborts the transfer: a final update was delivered, or
        // the stream must be reconnected.
        return runner.finished || runner.pendingError != nil ? 0 : length
    }

    private func receive(_ bytes: UnsafeRawBufferPointer) {
        var start = 0
        for (offset, byte) in bytes.enumerated() where byte == 0x0A {
            lineBuffer.append(contentsOf: bytes[start..<offset])
            start = offset + 1
            if !lineBuffer.isEmpty { handleLine(lineBuffer) }
            lineBuffer.removeAll(keepingCapacity: true)
            if finished || pendingError != nil { return }
        }
        lineBuffer.append(contentsOf: bytes[start...])
    }

    private func handleLine(_ line: [UInt8]) {
        guard !isCancelled, !finished, pendingError == nil else { return }
        let json: JSONValue
        do {
            json = try JSONValue.gatewayMessage(line)
        } catch {
            pendingError = error
            return
        }
        guard let result = json["result"] else {
            // A gateway error: {"error":{"grpc_code":14,"message":…}} inside a stream, or
            // {"error":"…","code":14} as a whole non-200 answer.
            let error = json["error"]
            let message = error?["message"]?.stringValue ?? json["message"]?.stringValue ?? error?.stringValue ?? json.text
            let code = Int(error?["grpc_code"]?.int64 ?? json["code"]?.int64 ?? 0)
            pendingError = EtcdError(code == EtcdError.GRPCStatus.unauthenticated ? .authentication : .unavailable,
                                     "etcd watch on \(currentEndpoint): \(message)", endpoints: [currentEndpoint], grpcCode: code)
            return
        }
        let header = ResponseHeader(json: result["header"])
        if result["canceled"]?.boolValue == true {
            let compactRevision = result["compact_revision"]?.int64 ?? 0
            if compactRevision > 0 {
                finished = true
                onUpdate(.compacted(compactRevision: compactRevision))
                return
            }
            let reason = result["cancel_reason"]?.stringValue ?? "no reason given"
            if reason.contains("invalid auth token") || EtcdError.meansStaleToken(reason) {
                // The token expired: reconnect with a new one.
                pendingError = EtcdError(.authentication, "etcd watch on \(currentEndpoint): \(reason)",
                                         endpoints: [currentEndpoint], grpcCode: EtcdError.GRPCStatus.unauthenticated)
                return
            }
            finished = true
            onUpdate(.failed(EtcdError(.server, "etcd cancelled the watch on \(currentEndpoint): \(reason)", endpoints: [currentEndpoint])))
            return
        }
        if result["created"]?.boolValue == true {
            awaitingCreated = false
            client.prefer(endpointIndex)
            failuresInARow = 0
            // A watch "from now" resumes after the revision it was created at.
            shared.withLock { if $0.next == 0 { $0.next = header.revision + 1 } }
            onUpdate(.created(endpoint: currentEndpoint, revision: header.revision))
            return
        }
        let items = result["events"]?.elements ?? []
        if items.isEmpty {
            shared.withLock { $0.next = max($0.next, header.revision + 1) }
            onUpdate(.progress(revision: header.revision))
            return
        }
        var events: [WatchEvent] = []
        for item in items {
            do {
                events.append(try WatchEvent(json: item))
            } catch {
                pendingError = error
                return
            }
        }
        let last = events.map(\.kv.modRevision).max() ?? header.revision
        shared.withLock { $0.next = max($0.next, last + 1) }
        onUpdate(.events(events, revision: header.revision))
    }
}
