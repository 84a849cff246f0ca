/// Why an etcd call failed.
///
/// The code says what the caller can do about it: ``Code-swift.enum/unavailable`` means the
/// request reached no member (nothing was written, it is safe to retry later);
/// ``Code-swift.enum/timedOut`` means a member took the request but did not answer in time (a
/// write may or may not have happened: read it back); ``Code-swift.enum/server`` is etcd's own
/// refusal, with its gRPC status code.
public struct EtcdError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The kind of failure.
    public enum Code: Equatable, Sendable {
        /// No endpoint could be reached (refused, unresolvable, TLS failure, connect timeout).
        case unavailable
        /// An endpoint took the request but the deadline passed before it answered.
        case timedOut
        /// etcd answered with an error: see ``EtcdError/grpcCode`` and the message.
        case server
        /// The user name or password was refused, or auth is needed and no credentials were given.
        case authentication
        /// A lease that etcd does not know (expired or revoked).
        case leaseNotFound
        /// etcd's answer could not be understood.
        case malformedResponse
        /// The request is invalid before it is sent (bad endpoint, too large).
        case invalidRequest
    }

    /// The kind of failure.
    public var code: Code
    /// What happened, naming the endpoints tried.
    public var message: String
    /// The endpoints that were tried (all of them for ``Code-swift.enum/unavailable``).
    public var endpoints: [String]
    /// etcd's gRPC status code for ``Code-swift.enum/server`` (14 = Unavailable, 16 = Unauthenticated…).
    public var grpcCode: Int?

    /// Creates an error; `message` should say what was attempted and what went wrong.
    public init(_ code: Code, _ message: String, endpoints: [String] = [], grpcCode: Int? = nil) {
        self.code = code
        self.message = message
        self.endpoints = endpoints
        self.grpcCode = grpcCode
    }

    /// The message.
    public var description: String { message }

    /// Whether etcd's `message` says the auth token predates its auth store ("revision of auth
    /// store is old", gRPC 3 rather than 16): the cluster was restored from a backup taken before
    /// the token was issued. A new token is needed, as after an expiry.
    static func meansStaleToken(_ message: String) -> Bool {
        message.contains("revision of auth store is old")
    }

    /// gRPC status codes etcd uses that the client acts on.
    enum GRPCStatus {
        static let invalidArgument = 3
        static let notFound = 5
        static let unavailable = 14
        static let unauthenticated = 16
    }
}
