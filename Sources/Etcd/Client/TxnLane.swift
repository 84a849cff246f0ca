import CCurl
import JSON

/// One txn at a time, **started** on the caller's thread without waiting for the network and
/// **finished** on a thread that may wait: the request is in etcd's socket before any thread
/// hop, so the hop to the thread that waits for the answer costs no latency.
///
/// ``start(compares:success:failure:resendIfConnectionLost:timeout:)`` builds the request and
/// runs one `curl_multi_perform` on a libcurl multi handle of the lane's own: libcurl writes the
/// request on the connection the lane keeps open (or begins a non-blocking connect and leaves
/// the rest to ``finish()``); it never waits. ``finish()`` polls the multi handle until the
/// answer, then goes on as ``EtcdClient/txn(compares:success:failure:resendIfConnectionLost:timeout:)``
/// does (other endpoints, a renewed token) with the client's pooled handles.
///
/// **Ownership.** The lane has one owner at a time and one txn at most: whoever started a txn
/// hands the lane to the thread that finishes it (a queue's `async` orders the two), and starts
/// the next only once that one finished (the fleet keeps a lane busy until its answer was
/// delivered); `start` checks that no txn is running.
public final class TxnLane: @unchecked Sendable {
    // Safety: the ownership above; every field is touched by the lane's current owner only.
    private let client: EtcdClient
    private let handle: CurlEasy
    private let multi: UnsafeMutableRawPointer
    private var sink = ResponseSink(limit: 0)
    private var call: EtcdClient.Call?

    /// Whether this libcurl resolves names without blocking (`CURL_VERSION_ASYNCHDNS`): with a
    /// blocking resolver, a start could wait for DNS.
    private static let resolvesAsynchronously = LibCurl.api.features & (1 << 7) != 0

    init(client: EtcdClient) throws(EtcdError) {
        self.client = client
        handle = try CurlEasy(options: client.options)
        guard let multi = LibCurl.api.multiInit() else {
            throw EtcdError(.invalidRequest, "libcurl could not create a multi handle (curl_multi_init)")
        }
        self.multi = multi
    }

    deinit {
        if call != nil { _ = LibCurl.api.multiRemoveHandle(multi, handle.handle) }
        _ = LibCurl.api.multiCleanup(multi)
    }

    /// Starts a txn (the arguments of ``EtcdClient/txn(compares:success:failure:resendIfConnectionLost:timeout:)``);
    /// false when it cannot be started without waiting (a token to ask for first, a resolver
    /// that blocks): then nothing was done, and the caller sends it with `txn` instead.
    public func start(compares: [Compare], success: [RequestOp], failure: [RequestOp],
                      resendIfConnectionLost: Bool, timeout: Duration?) -> Bool {
        precondition(call == nil, "a TxnLane runs one txn at a time")
        guard Self.resolvesAsynchronously, let token = client.tokenAtHand else { return false }
        let started = client.txnCall(compares: compares, success: success, failure: failure,
                                     resendIfConnectionLost: resendIfConnectionLost, timeout: timeout, token: token)
        sink = ResponseSink(limit: client.options.maximumResponseSize)
        // The lane holds its sink until finish() (CURLOPT_WRITEDATA is unretained).
        handle.prepare(url: client.endpoints[started.first] + started.path, body: started.body, token: token,
                       timeout: started.requestTimeout, connectTimeout: min(started.requestTimeout, client.options.connectTimeout),
                       receive: ResponseSink.receive, sink: Unmanaged.passUnretained(sink).toOpaque())
        _ = LibCurl.api.multiAddHandle(multi, handle.handle)
        call = started
        var running: Int32 = 0
        _ = LibCurl.api.multiPerform(multi, &running)
        return true
    }

    /// Waits for the started txn's answer (within its timeout, as libcurl bounds the transfer)
    /// and returns it, or etcd's error, as `txn` would.
    public func finish() throws(EtcdError) -> TxnResponse {
        guard let started = call else { preconditionFailure("TxnLane.finish without a started txn") }
        var running: Int32 = 1
        var result = CURLE_OK
        while true {
            guard LibCurl.api.multiPerform(multi, &running) == CURLM_OK else {
                result = CURLE_FAILED_INIT
                break
            }
            var pending: Int32 = 0
            var done = false
            while let message = LibCurl.api.multiInfoRead(multi, &pending) {
                if message.pointee.msg == CURLMSG_DONE {
                    result = message.pointee.data.result
                    done = true
                }
            }
            if done || running == 0 { break }
            var ignored: Int32 = 0
            _ = LibCurl.api.multiPoll(multi, nil, 0, 1000, &ignored)
        }
        let outcome = EtcdClient.attempt(ended: result, handle, sink)
        _ = LibCurl.api.multiRemoveHandle(multi, handle.handle)
        call = nil
        return try TxnResponse(json: client.complete(started, started: outcome))
    }
}

extension EtcdClient {
    /// A lane of its own for txns started without waiting (``TxnLane``): one libcurl handle
    /// and connection, used by one txn at a time.
    public func makeTxnLane() throws(EtcdError) -> TxnLane {
        try TxnLane(client: self)
    }
}
