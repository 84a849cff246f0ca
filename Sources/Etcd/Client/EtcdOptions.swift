/// How an ``EtcdClient`` talks to the cluster.
public struct EtcdOptions: Sendable {
    /// A user name and password for etcd's auth (`/v3/auth/authenticate`).
    public struct Credentials: Sendable, Equatable {
        /// The etcd user.
        public var user: String
        /// Its password.
        public var password: String

        /// Creates credentials.
        public init(user: String, password: String) {
            self.user = user
            self.password = password
        }
    }

    /// The longest a unary call may take, all endpoints and retries included. A write to an
    /// unreachable cluster fails within this with ``EtcdError/Code-swift.enum/unavailable``.
    public var requestTimeout: Duration = .seconds(3)
    /// The longest one connection attempt may take before the next endpoint is tried.
    public var connectTimeout: Duration = .seconds(1)
    /// A PEM file of the CA that signed the members' certificates (`https://` endpoints).
    public var caFile: String?
    /// A PEM client certificate to present (`CURLOPT_SSLCERT`), for members that require one
    /// (`--client-cert-auth`); with ``keyFile``.
    public var certFile: String?
    /// The PEM private key of ``certFile`` (`CURLOPT_SSLKEY`).
    public var keyFile: String?
    /// etcd credentials; nil when the cluster has auth off.
    public var credentials: Credentials?
    /// How long a watch waits before it reconnects after an interruption (doubled after each
    /// failed reconnection, up to 16 times this).
    public var watchRetryDelay: Duration = .milliseconds(200)
    /// Ask etcd for progress notifications on watches.
    public var progressNotify = true
    /// The largest response body accepted, in bytes (etcd's own default request limit is 1.5 MiB,
    /// but a range can be larger).
    public var maximumResponseSize = 256 << 20

    /// The defaults: 3 s per call, 1 s per connection attempt, plain HTTP, no auth.
    public init() {}
}
