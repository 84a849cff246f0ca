import CCurl
import Glibc
import JSON
import Synchronization

/// A client of an etcd v3 cluster through its HTTP/1.1 JSON gateway (etcd 3.4's `/v3/…`).
///
/// Unary calls (``range(key:prefix:revision:)``, ``put(key:value:lease:)``,
/// ``txn(compares:success:failure:)``, leases…) are synchronous: they block the calling thread
/// for at most ``EtcdOptions/requestTimeout``, so call them from a thread or queue that may wait
/// (never from the D-Bus connection's queue). Any number of threads may call at once; each call
/// takes a reused libcurl handle from a pool. Watches run on threads of their own
/// (``watch(prefix:fromRevision:onUpdate:)``).
///
/// **Endpoints.** A call goes to the member that answered last; if it cannot be reached it goes
/// to the next, and so on. Reads also move on when a member answers "unavailable" or does not
/// answer in time; writes only when the member provably never saw the request (no connection,
/// or etcd's "no leader", which it says before proposing), because a write that timed out may
/// have been applied.
///
/// **Ownership.** `endpoints` and `options` are immutable. The pool of idle handles, the index
/// of the preferred endpoint and the auth token are the `state`, guarded by its `Mutex` and held
/// only for those few field accesses (never across I/O).
public final class EtcdClient: Sendable {
    /// The members' base URLs, in the order given.
    public let endpoints: [String]
    /// The options the client was made with.
    public let options: EtcdOptions

    private struct State {
        var idleHandles: [CurlEasy] = []
        var preferred = 0
        var token: String?
    }

    private let state = Mutex(State())
    /// Kept idle at most: a caller may have several calls out at once (txns, reads, lease
    /// renewals), and a handle freed and made again costs a new TCP connection.
    private static let maximumIdleHandles = 16

    /// A client of the cluster whose members are `endpoints` (`http://host:port`,
    /// `https://host:port` or `host:port`). Nothing is contacted yet.
    public init(endpoints: [String], options: EtcdOptions = EtcdOptions()) throws(EtcdError) {
        guard !endpoints.isEmpty else { throw EtcdError(.invalidRequest, "no etcd endpoint given") }
        try LibCurl.require()
        var parsed: [String] = []
        for text in endpoints { parsed.append(try Endpoint(text, tls: options.caFile != nil).url) }
        self.endpoints = parsed
        self.options = options
    }

    // MARK: - KV

    /// Reads `key` (or every key under the prefix `key` when `prefix` is true), at `revision`
    /// (0: the latest), linearizably.
    public func range(key: [UInt8], prefix: Bool = false, revision: Int64 = 0) throws(EtcdError) -> RangeResponse {
        try range(RangeRequest(key: key, prefix: prefix, revision: revision))
    }

    /// Runs a read.
    public func range(_ request: RangeRequest) throws(EtcdError) -> RangeResponse {
        try RangeResponse(json: call("/v3/kv/range", request.json, retrySafe: true))
    }

    /// Runs a read within `timeout` instead of ``EtcdOptions/requestTimeout`` (a caller that
    /// must answer a person soon, such as a host list for `propctl status`).
    public func range(_ request: RangeRequest, timeout: Duration) throws(EtcdError) -> RangeResponse {
        try RangeResponse(json: call("/v3/kv/range", request.json, retrySafe: true, timeout: timeout))
    }

    /// Writes `value` to `key`, attached to `lease` if not 0.
    @discardableResult
    public func put(key: [UInt8], value: [UInt8], lease: Int64 = 0) throws(EtcdError) -> PutResponse {
        try put(PutRequest(key: key, value: value, lease: lease))
    }

    /// Runs a write.
    @discardableResult
    public func put(_ request: PutRequest) throws(EtcdError) -> PutResponse {
        try PutResponse(json: call("/v3/kv/put", request.json, retrySafe: false))
    }

    /// Deletes `key` (or every key under the prefix `key` when `prefix` is true).
    @discardableResult
    public func delete(key: [UInt8], prefix: Bool = false) throws(EtcdError) -> DeleteRangeResponse {
        try delete(DeleteRangeRequest(key: key, prefix: prefix))
    }

    /// Runs a deletion.
    @discardableResult
    public func delete(_ request: DeleteRangeRequest) throws(EtcdError) -> DeleteRangeResponse {
        try DeleteRangeResponse(json: call("/v3/kv/deleterange", request.json, retrySafe: false))
    }

    /// Runs a transaction: if every compare holds, the `success` operations, otherwise the
    /// `failure` ones, atomically at one new revision. etcd refuses more than 128 operations per
    /// branch and requests above 1.5 MiB (its defaults).
    ///
    /// `resendIfConnectionLost`: the compares make a second application impossible (they
    /// guard every key the success branch writes), so a txn whose connection went away before
    /// its answer (the member died) is sent again at once to the next member, within the
    /// request timeout. One that timed out is not: the member may still apply it.
    ///
    /// `timeout`: less than ``EtcdOptions/requestTimeout``, for a caller whose own bound has
    /// partly gone by.
    public func txn(compares: [Compare], success: [RequestOp], failure: [RequestOp] = [],
                    resendIfConnectionLost: Bool = false, timeout: Duration? = nil) throws(EtcdError) -> TxnResponse {
        let token = try self.token()
        return try TxnResponse(json: complete(txnCall(compares: compares, success: success, failure: failure,
                                                      resendIfConnectionLost: resendIfConnectionLost, timeout: timeout, token: token)))
    }

    /// A txn's call, its body written by ``TxnBodyWriter``.
    func txnCall(compares: [Compare], success: [RequestOp], failure: [RequestOp], resendIfConnectionLost: Bool,
                 timeout: Duration?, token: String?) -> Call {
        // A txn whose branches only read is safe to send twice.
        let readOnly = success.allSatisfy(\.isRead) && failure.allSatisfy(\.isRead)
        return Call(path: "/v3/kv/txn", body: TxnBodyWriter.body(compares: compares, success: success, failure: failure),
                    retrySafe: readOnly, authenticated: true, requestTimeout: timeout ?? options.requestTimeout,
                    resendIfConnectionLost: resendIfConnectionLost, token: token, first: preferredEndpoint)
    }

    /// The token to send without waiting: `nil` when one must first be asked for.
    var tokenAtHand: String?? {
        guard options.credentials != nil else { return .some(nil) }
        return state.withLock { $0.token }.map { .some($0) }
    }

    /// Discards the history before `revision` (etcd's `/v3/kv/compaction`); watches from an
    /// older revision are then cancelled with the compact revision.
    public func compact(revision: Int64, physical: Bool = true) throws(EtcdError) {
        var members: [(String, JSONValue)] = [("revision", .int64(revision))]
        if physical { members.append(("physical", .bool(true))) }
        _ = try call("/v3/kv/compaction", .object(members), retrySafe: false)
    }

    // MARK: - Leases

    /// Grants a lease of `ttl` seconds.
    public func grantLease(ttl: Int64) throws(EtcdError) -> Lease {
        let json = try call("/v3/lease/grant", .object([("TTL", .int64(ttl))]), retrySafe: false)
        if let error = json["error"]?.stringValue, !error.isEmpty {
            throw EtcdError(.server, "etcd refused a lease of \(ttl) s: \(error)", endpoints: endpoints)
        }
        return Lease(id: json["ID"]?.int64 ?? 0, ttl: json["TTL"]?.int64 ?? 0)
    }

    /// Renews lease `id` once (call it every third of the TTL); returns the TTL granted again.
    /// Throws ``EtcdError/Code-swift.enum/leaseNotFound`` if the lease expired or was revoked.
    @discardableResult
    public func keepAlive(lease id: Int64) throws(EtcdError) -> Int64 {
        // The gateway's keepalive is a stream; one request object, then the end of the body,
        // gets exactly one answer.
        let json = try call("/v3/lease/keepalive", .object([("ID", .int64(id))]), retrySafe: true)
        let ttl = json["result"]?["TTL"]?.int64 ?? 0
        // An unknown lease is answered with TTL 0 (left out), not with an error.
        guard ttl > 0 else {
            throw EtcdError(.leaseNotFound, "etcd lease \(id) has expired or was revoked", endpoints: endpoints)
        }
        return ttl
    }

    /// Revokes lease `id`: the keys attached to it are deleted now.
    public func revoke(lease id: Int64) throws(EtcdError) {
        do {
            _ = try call("/v3/lease/revoke", .object([("ID", .int64(id))]), retrySafe: false)
        } catch let error where error.grpcCode == EtcdError.GRPCStatus.notFound {
            throw EtcdError(.leaseNotFound, "etcd lease \(id) has expired or was revoked", endpoints: endpoints)
        }
    }

    // MARK: - Watch

    /// Watches every key under `prefix` from `fromRevision` (0: from the revision at which the
    /// stream is first established; pass a revision to miss nothing), calling `onUpdate`
    /// on the stream's own thread, in order, until the stream is cancelled or ends (compaction,
    /// refusal). Interruptions are reported and the stream resumes by itself after the last
    /// revision it delivered, on the next endpoint.
    public func watch(prefix: [UInt8], fromRevision: Int64 = 0,
                      onUpdate: @escaping @Sendable (WatchUpdate) -> Void) -> WatchStream {
        WatchStream(client: self, key: prefix, rangeEnd: RangeRequest.prefixEnd(of: prefix),
                    fromRevision: fromRevision, onUpdate: onUpdate)
    }

    /// Watches one key (or the range up to `rangeEnd`), like ``watch(prefix:fromRevision:onUpdate:)``.
    public func watch(key: [UInt8], rangeEnd: [UInt8]? = nil, fromRevision: Int64 = 0,
                      onUpdate: @escaping @Sendable (WatchUpdate) -> Void) -> WatchStream {
        WatchStream(client: self, key: key, rangeEnd: rangeEnd, fromRevision: fromRevision, onUpdate: onUpdate)
    }

    // MARK: - Shared with WatchStream

    /// The endpoint to try first: the one that answered last.
    var preferredEndpoint: Int { state.withLock { $0.preferred } }

    /// Remembers `index` as the endpoint to try first.
    func prefer(_ index: Int) {
        state.withLock { $0.preferred = index % endpoints.count }
    }

    /// The auth token to send, authenticating first if credentials are set and no token is held.
    func token(renew: Bool = false) throws(EtcdError) -> String? {
        guard let credentials = options.credentials else { return nil }
        if !renew, let token = state.withLock({ $0.token }) { return token }
        let json = try call("/v3/auth/authenticate",
                            .object([("name", .string(credentials.user)), ("password", .string(credentials.password))]),
                            retrySafe: true, authenticated: false)
        guard let token = json["token"]?.stringValue, !token.isEmpty else {
            throw EtcdError(.authentication, "etcd gave no token for user '\(credentials.user)'", endpoints: endpoints)
        }
        state.withLock { $0.token = token }
        return token
    }

    /// Drops the auth token after a request that timed out: etcd restored from a backup taken
    /// before the token was issued holds such a token's requests without answering (its auth
    /// store waits for a revision it will never reach), so the next call signs in again.
    func forgetToken() {
        guard options.credentials != nil else { return }
        state.withLock { $0.token = nil }
    }

    /// A handle from the pool, or a new one.
    func takeHandle() throws(EtcdError) -> CurlEasy {
        if let handle = state.withLock({ $0.idleHandles.popLast() }) { return handle }
        return try CurlEasy(options: options)
    }

    /// Gives `handle` back to the pool (or frees it when the pool is full).
    func returnHandle(_ handle: CurlEasy) {
        state.withLock { state in
            if state.idleHandles.count < EtcdClient.maximumIdleHandles { state.idleHandles.append(handle) }
        }
    }

    // MARK: - Calls

    /// How one attempt on one endpoint ended.
    enum Attempt {
        case answered(status: Int, body: JSONValue)
        /// The request never left: another endpoint may take it, even a write.
        case notSent(String)
        /// Sent, but no (complete) answer: a write's fate is unknown.
        case lost(String, timedOut: Bool)
    }

    /// POSTs `body` to `path`, moving through the endpoints as the class documentation says,
    /// and returns the answer's JSON, or throws etcd's error.
    func call(_ path: String, _ body: JSONValue, retrySafe: Bool, authenticated: Bool = true,
              timeout: Duration? = nil, resendIfConnectionLost: Bool = false) throws(EtcdError) -> JSONValue {
        let token = authenticated ? try self.token() : nil
        return try complete(Call(path: path, body: Array(body.text.utf8), retrySafe: retrySafe, authenticated: authenticated,
                                 requestTimeout: timeout ?? options.requestTimeout, resendIfConnectionLost: resendIfConnectionLost,
                                 token: token, first: preferredEndpoint))
    }

    /// One call's parameters, fixed when it begins (``TxnLane`` begins one on one thread and
    /// completes it on another).
    struct Call {
        let path: String
        let body: [UInt8]
        let retrySafe: Bool
        let authenticated: Bool
        let requestTimeout: Duration
        let resendIfConnectionLost: Bool
        var token: String?
        /// The endpoint tried first.
        let first: Int
        let deadline: ContinuousClock.Instant

        init(path: String, body: [UInt8], retrySafe: Bool, authenticated: Bool, requestTimeout: Duration,
             resendIfConnectionLost: Bool, token: String?, first: Int) {
            self.path = path
            self.body = body
            self.retrySafe = retrySafe
            self.authenticated = authenticated
            self.requestTimeout = requestTimeout
            self.resendIfConnectionLost = resendIfConnectionLost
            self.token = token
            self.first = first
            deadline = ContinuousClock().now + requestTimeout
        }
    }

    /// Runs `call` through the endpoints; `started`: how its first attempt, on its first
    /// endpoint, already ended (a ``TxnLane``'s).
    func complete(_ call: Call, started: Attempt? = nil) throws(EtcdError) -> JSONValue {
        let clock = ContinuousClock()
        let path = call.path, body = call.body, retrySafe = call.retrySafe, authenticated = call.authenticated
        let requestTimeout = call.requestTimeout, deadline = call.deadline, resendIfConnectionLost = call.resendIfConnectionLost
        var token = call.token
        var started = started
        var renewedToken = false
        var failures: [String] = []
        let first = call.first
        var tries = 0
        var reachedOne = false
        while true {
            let index = (first + tries) % endpoints.count
            let endpoint = endpoints[index]
            let remaining = deadline - clock.now
            guard started != nil || remaining > .zero else {
                throw EtcdError(reachedOne ? .timedOut : .unavailable,
                                "etcd did not answer \(path) within \(requestTimeout): \(failures.joined(separator: "; "))",
                                endpoints: endpoints)
            }
            // A read shares what is left among the endpoints still to try in this pass, so one
            // member that takes requests and never answers cannot use up the whole deadline. A
            // write that reached a member cannot be resent, so it gets all that is left.
            let left = endpoints.count - tries % endpoints.count
            let budget = retrySafe ? min(remaining, max(remaining / left, .milliseconds(300))) : remaining
            let outcome: Attempt
            if let done = started {
                outcome = done
                started = nil
            } else {
                outcome = attempt(endpoint + path, body, token: token, timeout: budget)
            }
            switch outcome {
            case let .answered(status, json):
                if status == 200 {
                    if index != first { prefer(index) }
                    return json
                }
                let code = Int(json["code"]?.int64 ?? 0)
                let message = json["message"]?.stringValue ?? json["error"]?.stringValue ?? "HTTP status \(status)"
                if code == EtcdError.GRPCStatus.unauthenticated || EtcdError.meansStaleToken(message), authenticated,
                   options.credentials != nil, !renewedToken {
                    // The token expired (simple tokens last --auth-token-ttl), or etcd was
                    // restored from a backup and its auth store is older than the token: get a
                    // new one once.
                    renewedToken = true
                    token = try self.token(renew: true)
                    continue
                }
                if code == EtcdError.GRPCStatus.unavailable, retrySafe || message.contains("no leader") {
                    reachedOne = true
                    failures.append("\(endpoint): \(message)")
                } else if message.contains("authentication failed") || message.contains("user name is empty")
                            || code == EtcdError.GRPCStatus.unauthenticated {
                    throw EtcdError(.authentication, "etcd refused \(path) at \(endpoint): \(message)",
                                    endpoints: [endpoint], grpcCode: code)
                } else {
                    throw EtcdError(.server, "etcd refused \(path) at \(endpoint): \(message)", endpoints: [endpoint], grpcCode: code)
                }
            case let .notSent(reason):
                failures.append("\(endpoint): \(reason)")
            case let .lost(reason, timedOut):
                reachedOne = true
                if timedOut, authenticated { forgetToken() }
                failures.append("\(endpoint): \(reason)")
                guard retrySafe || (resendIfConnectionLost && !timedOut) else {
                    // The next call goes to another member at once: this one may be gone or hung.
                    prefer(index + 1)
                    throw EtcdError(timedOut ? .timedOut : .unavailable,
                                    "etcd at \(endpoint) took \(path) but gave no answer (\(reason)); it may or may not have been applied",
                                    endpoints: [endpoint])
                }
            }
            tries += 1
            if tries % endpoints.count == 0 {
                // A whole pass failed. If no member was even reachable, say so now (fail fast);
                // if some answered "unavailable" (an election), try again shortly.
                guard reachedOne else {
                    throw EtcdError(.unavailable, "etcd is unreachable at \(endpoints.joined(separator: ", ")): \(failures.joined(separator: "; "))",
                                    endpoints: endpoints)
                }
                let pause = min(Duration.milliseconds(100), deadline - clock.now)
                if pause > .zero { usleep(UInt32(CurlEasy.milliseconds(pause) * 1000)) }
            }
        }
    }

    /// One POST to one endpoint.
    private func attempt(_ url: String, _ body: [UInt8], token: String?, timeout: Duration) -> Attempt {
        let handle: CurlEasy
        do {
            handle = try takeHandle()
        } catch {
            return .notSent(error.message)
        }
        defer { returnHandle(handle) }
        let sink = ResponseSink(limit: options.maximumResponseSize)
        let unmanaged = Unmanaged.passRetained(sink)
        defer { unmanaged.release() }
        handle.prepare(url: url, body: body, token: token, timeout: timeout,
                       connectTimeout: min(timeout, options.connectTimeout),
                       receive: ResponseSink.receive, sink: unmanaged.toOpaque())
        return Self.attempt(ended: LibCurl.api.easyPerform(handle.handle), handle, sink)
    }

    /// How an attempt whose transfer ended with `result` went.
    static func attempt(ended result: CURLcode, _ handle: CurlEasy, _ sink: ResponseSink) -> Attempt {
        guard result == CURLE_OK else {
            let reason = handle.failureText(result)
            if !handle.requestWasSent { return .notSent(reason) }
            return .lost(reason, timedOut: result == CURLE_OPERATION_TIMEDOUT)
        }
        do {
            return .answered(status: handle.responseCode, body: try JSONValue.gatewayMessage(sink.body))
        } catch {
            return .lost("unreadable answer (HTTP \(handle.responseCode)): \(error.message)", timedOut: false)
        }
    }
}

/// Collects a response body for one unary call (the target of `CURLOPT_WRITEDATA`).
final class ResponseSink {
    var body: [UInt8] = []
    let limit: Int

    init(limit: Int) {
        self.limit = limit
    }

    static let receive: pb_curl_data_callback = { data, size, count, user in
        let sink = Unmanaged<ResponseSink>.fromOpaque(user!).takeUnretainedValue()
        let length = size * count
        // Returning less than `length` makes libcurl stop with CURLE_WRITE_ERROR.
        guard sink.body.count + length <= sink.limit else { return 0 }
        if let data { sink.body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: length)) }
        return length
    }
}
