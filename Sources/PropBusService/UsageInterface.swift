import DBus
import PropBus

extension Service {
    /// `a{s(tt)}`: quota name → (used, limit), the limit `UINT64_MAX` for a uid held to none.
    static let usageType = DBusType.dictionary(key: .string, value: .structure([.uint64, .uint64]))

    /// What every uid holds, from the tables that hold it: bindings, properties and their
    /// values, overrides (the model), commands and running executions (the command table), and
    /// the history of its changes (the history port).
    var usageLedger: UsageLedger {
        var ledger = model.usage.merging(model.bindings.usage).merging(model.leases.usage).merging(commands.usage)
        // What history keeps of each uid's changes, as the history port counts it.
        for (uid, bytes) in history?.historyUsage() ?? [:] { ledger.charge(.historyBytes, to: uid, bytes) }
        return ledger
    }

    /// `uid`'s usage of every quota against its limit, as `GetUsage` answers it.
    func usage(of uid: UInt32, in ledger: UsageLedger) -> DBusValue {
        let entries = Quota.allCases.sorted().map { quota in
            let limit = model.quotas.limit(quota, for: uid) ?? .max
            return DictionaryEntry(.string(quota.rawValue), .structure([.uint64(ledger.used(quota, by: uid)), .uint64(limit)]))
        }
        return .dictionary(key: .string, value: .structure([.uint64, .uint64]), entries)
    }

    /// Whether the caller of `call` may see what `uid` holds: its own, or anyone's for root and
    /// the daemon's user (and for everyone without access control).
    func maySeeUsage(of uid: UInt32, by call: MethodCall) -> Bool {
        options.access.isPrivileged(call.credentials) || call.credentials?.userID == uid
    }

    /// GetUsage and ListUsage of the Manager interface.
    func usageMethods() -> [MethodDescription] {
        [
            MethodDescription("GetUsage", in: [("uid", .uint32)], out: [("usage", Self.usageType)],
                              access: .custom { [unowned self] call throws(DBusError) in
                                  guard case .uint32(let uid) = try call.argument("uid") else { return }
                                  guard !maySeeUsage(of: uid, by: call) else { return }
                                  throw PropBusError(.accessDenied, "\(AccessPolicy.describe(call.credentials)) may not read the usage of uid \(uid); a uid reads its own, root everyone's").dbusError
                              }) { [unowned self] call throws(DBusError) in
                guard case .uint32(let uid) = try call.argument("uid") else { throw .invalidArgs("GetUsage expects (u uid)") }
                return .reply([usage(of: uid, in: usageLedger)])
            },
            MethodDescription("ListUsage", out: [("usage", .array(.structure([.uint32, Self.usageType])))]) { [unowned self] call in
                // Every uid that holds anything, and the caller itself; only its own for a caller
                // who may not see the others'.
                let ledger = usageLedger
                var uids = ledger.principals
                if let caller = call.credentials?.userID { uids.insert(caller) }
                let rows = uids.sorted().filter { maySeeUsage(of: $0, by: call) }.map { uid in
                    DBusValue.structure([.uint32(uid), usage(of: uid, in: ledger)])
                }
                return .reply([.array(of: .structure([.uint32, Self.usageType]), rows)])
            },
        ]
    }
}
