import CCurl

/// One libcurl easy handle (`CURL *`, from `curl_easy_init`), set up for the etcd gateway.
///
/// A handle keeps its connections open between requests, so reusing it saves the TCP (and TLS)
/// handshake of every call: the client keeps idle handles in a pool.
final class CurlEasy: @unchecked Sendable {
    // Safety: libcurl allows a handle on any thread but on one at a time. A handle is either in the
    // client's pool (under its `Mutex`) or held by the one call or watch thread that took it, never
    // both.
    /// The `CURL *`.
    let handle: UnsafeMutableRawPointer
    /// libcurl's message for the last failure (`CURLOPT_ERRORBUFFER`), valid for the handle's life.
    private let errorBuffer: UnsafeMutablePointer<CChar>
    /// The request's headers (`curl_slist`), freed when replaced and in `deinit`.
    private var headers: UnsafeMutablePointer<curl_slist>?


    /// A new handle with the settings every etcd request shares: `options`' CA, and its
    /// client certificate and key if any.
    init(options: EtcdOptions) throws(EtcdError) {
        guard let handle = LibCurl.api.easyInit() else {
            throw EtcdError(.invalidRequest, "libcurl could not create a handle (curl_easy_init)")
        }
        self.handle = handle
        errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE))
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
        _ = pb_curl_setopt_ptr(LibCurl.api.setopt, handle, CURLOPT_ERRORBUFFER, errorBuffer)
        // Signals would be process-wide: libcurl's alarm()-based DNS timeouts are unsafe in a
        // threaded program.
        _ = pb_curl_setopt_long(LibCurl.api.setopt, handle, CURLOPT_NOSIGNAL, 1)
        // Small requests must not wait for Nagle's algorithm (libcurl's default, set anyway).
        _ = pb_curl_setopt_long(LibCurl.api.setopt, handle, CURLOPT_TCP_NODELAY, 1)
        // A peer that vanished without a FIN is noticed on an idle watch within seconds.
        _ = pb_curl_setopt_long(LibCurl.api.setopt, handle, CURLOPT_TCP_KEEPALIVE, 1)
        _ = pb_curl_setopt_long(LibCurl.api.setopt, handle, CURLOPT_TCP_KEEPIDLE, 5)
        _ = pb_curl_setopt_long(LibCurl.api.setopt, handle, CURLOPT_TCP_KEEPINTVL, 2)
        _ = pb_curl_setopt_long(LibCurl.api.setopt, handle, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_1_1))
        _ = pb_curl_setopt_long(LibCurl.api.setopt, handle, CURLOPT_POST, 1)
        if let caFile = options.caFile {
            _ = pb_curl_setopt_str(LibCurl.api.setopt, handle, CURLOPT_CAINFO, caFile)
        }
        if let certFile = options.certFile {
            _ = pb_curl_setopt_str(LibCurl.api.setopt, handle, CURLOPT_SSLCERT, certFile)
        }
        if let keyFile = options.keyFile {
            _ = pb_curl_setopt_str(LibCurl.api.setopt, handle, CURLOPT_SSLKEY, keyFile)
        }
    }

    deinit {
        LibCurl.api.easyCleanup(handle)
        if let headers { LibCurl.api.slistFreeAll(headers) }
        errorBuffer.deallocate()
    }

    /// Sets up a POST of `body` to `url`; `sink` is handed to `receive` with every piece of the
    /// response body and must stay alive until the transfer ends.
    func prepare(url: String, body: String, token: String?, extraHeaders: [String] = [],
                 timeout: Duration?, connectTimeout: Duration,
                 receive: pb_curl_data_callback, sink: UnsafeMutableRawPointer) {
        prepare(url: url, body: Array(body.utf8), token: token, extraHeaders: extraHeaders, timeout: timeout,
                connectTimeout: connectTimeout, receive: receive, sink: sink)
    }

    /// ``prepare(url:body:token:extraHeaders:timeout:connectTimeout:receive:sink:)`` with the
    /// body's bytes.
    func prepare(url: String, body bytes: [UInt8], token: String?, extraHeaders: [String] = [],
                 timeout: Duration?, connectTimeout: Duration,
                 receive: pb_curl_data_callback, sink: UnsafeMutableRawPointer) {
        errorBuffer[0] = 0
        _ = pb_curl_setopt_str(LibCurl.api.setopt, handle, CURLOPT_URL, url)
        // The size first: COPYPOSTFIELDS copies that many bytes.
        _ = pb_curl_setopt_off(LibCurl.api.setopt, handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(bytes.count))
        bytes.withUnsafeBufferPointer { buffer in
            _ = pb_curl_setopt_ptr(LibCurl.api.setopt, handle, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: buffer.baseAddress ?? UnsafePointer(bitPattern: 1)!))
        }
        if let headers { LibCurl.api.slistFreeAll(headers) }
        // "Expect:" turns off `Expect: 100-continue`, which libcurl sends for bodies above 1 KiB
        // and which costs a round trip (or a 1 s wait) per large txn.
        var list: UnsafeMutablePointer<curl_slist>? = nil
        for line in ["Content-Type: application/json", "Expect:"] + extraHeaders + (token.map { ["Authorization: \($0)"] } ?? []) {
            list = LibCurl.api.slistAppend(list, line)
        }
        headers = list
        _ = pb_curl_setopt_ptr(LibCurl.api.setopt, handle, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(list))
        _ = pb_curl_setopt_long(LibCurl.api.setopt, handle, CURLOPT_TIMEOUT_MS, timeout.map(CurlEasy.milliseconds) ?? 0)
        _ = pb_curl_setopt_long(LibCurl.api.setopt, handle, CURLOPT_CONNECTTIMEOUT_MS, CurlEasy.milliseconds(connectTimeout))
        _ = pb_curl_setopt_callback(LibCurl.api.setopt, handle, CURLOPT_WRITEFUNCTION, receive)
        _ = pb_curl_setopt_ptr(LibCurl.api.setopt, handle, CURLOPT_WRITEDATA, sink)
    }

    /// libcurl's explanation of the last failure, or its generic text for `code`.
    func failureText(_ code: CURLcode) -> String {
        let detail = String(cString: errorBuffer)
        return detail.isEmpty ? LibCurl.api.easyStrerror(code).map { String(cString: $0) } ?? "libcurl error \(code.rawValue)" : detail
    }

    /// The HTTP status of the last response, 0 if none arrived.
    var responseCode: Int {
        var code = 0
        _ = pb_curl_getinfo_long(LibCurl.api.getinfo, handle, CURLINFO_RESPONSE_CODE, &code)
        return code
    }

    /// Whether the last request got as far as being sent: before that point (connect, TLS) a
    /// failure proves that the server never saw it, so even a write may go to another endpoint.
    var requestWasSent: Bool {
        var pretransfer: curl_off_t = 0
        _ = pb_curl_getinfo_off(LibCurl.api.getinfo, handle, CURLINFO_PRETRANSFER_TIME_T, &pretransfer)
        return pretransfer > 0
    }

    static func milliseconds(_ duration: Duration) -> Int {
        let (seconds, attoseconds) = duration.components
        return max(1, Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000))
    }
}
