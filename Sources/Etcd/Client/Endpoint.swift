/// One etcd member's client URL, as `http://host:port` or `https://host:port`.
struct Endpoint: Equatable, Sendable {
    /// The base URL, without a trailing slash.
    let url: String

    /// Parses `text`: a URL with scheme `http` or `https`, or a bare `host:port` (plain HTTP,
    /// or HTTPS when a CA file is given).
    init(_ text: String, tls: Bool) throws(EtcdError) {
        var rest = Substring(text)
        var scheme = tls ? "https" : "http"
        if let range = rest.firstRange(of: "://") {
            scheme = String(rest[..<range.lowerBound]).lowercased()
            rest = rest[range.upperBound...]
        }
        while rest.hasSuffix("/") { rest = rest.dropLast() }
        guard scheme == "http" || scheme == "https" else {
            throw EtcdError(.invalidRequest, "etcd endpoint '\(text)': the scheme must be http or https, not '\(scheme)'")
        }
        guard !rest.isEmpty, !rest.contains("/"), !rest.contains(where: { $0 == " " || $0 == "\n" }),
              let colon = rest.lastIndex(of: ":"), let port = Int(rest[rest.index(after: colon)...]),
              (1...65535).contains(port), colon != rest.startIndex else {
            throw EtcdError(.invalidRequest, "etcd endpoint '\(text)': expected HOST:PORT, optionally after http:// or https://")
        }
        url = "\(scheme)://\(rest)"
    }
}
