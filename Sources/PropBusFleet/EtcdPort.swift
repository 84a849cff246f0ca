import Etcd

/// What the fleet needs from etcd: reads, transactions, a watch of its prefix and the presence
/// lease. ``EtcdClient`` is the real one (below); a test's fake etcd is another.
///
/// Calls block their thread for at most the request timeout: the fleet makes them off the
/// D-Bus queue.
public protocol EtcdPort: Sendable {
    /// The bound of every call (``EtcdOptions/requestTimeout``).
    var requestTimeout: Duration { get }
    /// A linearizable read.
    func range(_ request: RangeRequest) throws(EtcdError) -> RangeResponse
    /// A read within `timeout` (a person waits for it).
    func range(_ request: RangeRequest, timeout: Duration) throws(EtcdError) -> RangeResponse
    /// A transaction; `resendIfConnectionLost` when its compares make a second application
    /// impossible, `timeout` what is left of its caller's bound.
    func txn(compares: [Compare], success: [RequestOp], failure: [RequestOp],
             resendIfConnectionLost: Bool, timeout: Duration?) throws(EtcdError) -> TxnResponse
    /// A put (the presence key), attached to `lease` if not 0.
    @discardableResult
    func put(key: [UInt8], value: [UInt8], lease: Int64) throws(EtcdError) -> PutResponse
    /// A new lease of `ttl` seconds.
    func grantLease(ttl: Int64) throws(EtcdError) -> Lease
    /// Renews lease `id` once; throws `leaseNotFound` once it expired.
    @discardableResult
    func keepAlive(lease id: Int64) throws(EtcdError) -> Int64
    /// Ends lease `id` and its keys.
    func revoke(lease id: Int64) throws(EtcdError)
    /// Watches every key under `prefix` from `fromRevision`, calling `onUpdate` in order on a
    /// thread of the watch's own.
    func watchPrefix(_ prefix: [UInt8], fromRevision: Int64, onUpdate: @escaping @Sendable (WatchUpdate) -> Void) -> any EtcdWatch
    /// A lane that starts txns without waiting (``EtcdTxnLane``), or nil (the default): txns
    /// are then sent whole with ``txn(compares:success:failure:resendIfConnectionLost:timeout:)``.
    func txnLane() -> (any EtcdTxnLane)?
}

extension EtcdPort {
    public func txnLane() -> (any EtcdTxnLane)? { nil }
}

/// One txn at a time, started on the D-Bus queue (never waiting) and finished on a thread that
/// may wait (``TxnLane``): the request is with etcd before the hop to that thread.
public protocol EtcdTxnLane: AnyObject, Sendable {
    /// Starts a txn; false when it cannot be without waiting (nothing was done then).
    func start(compares: [Compare], success: [RequestOp], failure: [RequestOp],
               resendIfConnectionLost: Bool, timeout: Duration?) -> Bool
    /// Waits for the started txn's answer, as ``EtcdPort/txn(compares:success:failure:resendIfConnectionLost:timeout:)`` would give it.
    func finish() throws(EtcdError) -> TxnResponse
}

extension TxnLane: EtcdTxnLane {}

/// A running watch of an ``EtcdPort``.
public protocol EtcdWatch: AnyObject, Sendable {
    /// Ends it; waits for its thread, so never call it where that thread may wait for you.
    func cancel()
}

extension WatchStream: EtcdWatch {}

/// The real port: the gateway client.
extension EtcdClient: EtcdPort {
    public var requestTimeout: Duration { options.requestTimeout }

    public func watchPrefix(_ prefix: [UInt8], fromRevision: Int64, onUpdate: @escaping @Sendable (WatchUpdate) -> Void) -> any EtcdWatch {
        watch(prefix: prefix, fromRevision: fromRevision, onUpdate: onUpdate)
    }

    public func txnLane() -> (any EtcdTxnLane)? {
        try? makeTxnLane()
    }
}
