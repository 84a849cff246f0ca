/// A resource charged to the uid that holds it (its principal), with a quota per uid.
public enum Quota: String, CaseIterable, Sendable, Comparable {
    /// Bindings, persistent ones included, whatever connection made them.
    case bindings
    /// Command executions running now.
    case executions
    /// Bytes of command input held by running executions (marshalled size).
    case inputBytes = "input-bytes"
    /// Properties created (by `CreateProperty`; model files' keys belong to the daemon).
    case properties
    /// Commands created.
    case commands
    /// Bytes of values held by the properties a uid created (marshalled size), whoever wrote them.
    case storedBytes = "stored-bytes"
    /// Overrides held (`Override`), connection-lifetime and TTL ones alike.
    case overrides
    /// Bytes of change history the uid's changes hold (rows on disk and transient keys'
    /// records in memory); past it its own oldest changes go first.
    case historyBytes = "history-bytes"

    /// The quota of each uid unless `--quota NAME=N` says otherwise.
    public var defaultLimit: UInt64 {
        switch self {
        case .bindings: 64
        case .executions: 16
        case .inputBytes: 16 << 20
        case .properties: 1000
        case .commands: 64
        case .storedBytes: 16 << 20
        case .overrides: 64
        case .historyBytes: 16 << 20
        }
    }

    /// What is counted, for messages: "bindings", "bytes of command input".
    public var noun: String {
        switch self {
        case .bindings: "bindings"
        case .executions: "running executions"
        case .inputBytes: "bytes of command input"
        case .properties: "properties"
        case .commands: "commands"
        case .storedBytes: "bytes of stored values"
        case .overrides: "overrides"
        case .historyBytes: "bytes of change history"
        }
    }

    /// Whether it counts bytes (messages then say "would hold", since one act adds many).
    public var countsBytes: Bool { self == .inputBytes || self == .storedBytes || self == .historyBytes }

    public static func < (lhs: Quota, rhs: Quota) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// The quota of every uid for each ``Quota``, and who is exempt: root and the daemon's own user.
///
/// Quotas apply only where callers are known, i.e. with access control on (`--system`,
/// `--system-access`): the session bus has one user, and its calls carry no credentials.
/// Pure: the tables that hold the resources count them (``UsageLedger``), this decides.
public struct Quotas: Sendable, Equatable {
    /// Whether quotas apply; when `false` every check passes.
    public var isEnabled: Bool
    /// The quota of each uid, per resource.
    public var limits: [Quota: UInt64]
    /// Uids without quotas: root and the daemon's own user.
    public var exempt: Set<UInt32>

    /// No quotas (the session bus).
    public static let off = Quotas(isEnabled: false, limits: [:], exempt: [])

    public init(isEnabled: Bool = true, limits: [Quota: UInt64] = [:], exempt: Set<UInt32> = [0]) {
        self.isEnabled = isEnabled
        self.limits = limits
        self.exempt = exempt
    }

    /// The quotas of a daemon running as `daemonUserID`: the defaults, with `overrides` (`--quota`).
    public static func enforcing(daemonUserID: UInt32, overrides: [Quota: UInt64] = [:]) -> Quotas {
        var limits: [Quota: UInt64] = [:]
        for quota in Quota.allCases { limits[quota] = overrides[quota] ?? quota.defaultLimit }
        return Quotas(limits: limits, exempt: [0, daemonUserID])
    }

    /// Whether `uid` is held to no quota (root, the daemon's user, or quotas off).
    public func isExempt(_ uid: UInt32?) -> Bool {
        guard isEnabled, let uid else { return true }
        return exempt.contains(uid)
    }

    /// Whether `uid` may take the execution slots kept for exempt callers: root and the
    /// daemon's user, or anyone when quotas are off; not a caller of unknown uid.
    public func mayUseReserve(_ uid: UInt32?) -> Bool {
        guard isEnabled else { return true }
        return uid.map(exempt.contains) ?? false
    }

    /// `uid`'s quota of `quota`; `nil`: unlimited.
    public func limit(_ quota: Quota, for uid: UInt32?) -> UInt64? {
        isExempt(uid) ? nil : limits[quota]
    }

    /// Throws `LimitsExceeded` naming the quota and the uid when `uid`, which holds `used`, may
    /// not take `amount` more.
    ///
    /// - Parameter action: what was refused, e.g. "cannot bind a to b".
    public func check(_ quota: Quota, uid: UInt32?, using used: UInt64, adding amount: UInt64 = 1,
                      _ action: @autoclosure () -> String) throws(PropBusError) {
        guard let uid, let limit = limit(quota, for: uid) else { return }
        let (total, overflow) = used.addingReportingOverflow(amount)
        guard overflow || total > limit else { return }
        let held = quota.countsBytes
            ? "uid \(uid) would hold \(overflow ? "more than \(UInt64.max)" : String(total)) \(quota.noun), more than its quota"
            : "uid \(uid) already holds \(used) \(quota.noun), its quota"
        throw PropBusError(.limitsExceeded, "\(action()): \(held) (--quota \(quota.rawValue)=\(limit))")
    }

    /// How many of `maximum` execution slots (`--max-executions`) are kept for exempt callers,
    /// so that one uid (or many) filling the rest cannot lock root out.
    public static func reservedExecutions(of maximum: Int) -> Int {
        maximum < 2 ? 0 : max(1, maximum / 8)
    }

    /// Reads `NAME=N` (`--quota`); the error says what was expected.
    public static func parse(_ text: String) -> Result<(Quota, UInt64), PropBusError> {
        let names = Quota.allCases.map(\.rawValue).joined(separator: ", ")
        guard let equals = text.firstIndex(of: "="), let quota = Quota(rawValue: String(text[..<equals])) else {
            return .failure(.invalidArgs("--quota expects NAME=N with NAME one of \(names), got '\(text)'"))
        }
        guard let limit = UInt64(text[text.index(after: equals)...]) else {
            return .failure(.invalidArgs("--quota \(quota.rawValue)=N expects a number N ≥ 0, got '\(text)'"))
        }
        return .success((quota, limit))
    }
}

/// What each uid holds of each ``Quota``, kept in step by the table that holds the resources
/// (bindings, properties): charged when one comes, released when it goes, so that a check is a
/// lookup and not a count.
public struct UsageLedger: Sendable, Equatable {
    private var used: [UInt32: [Quota: UInt64]] = [:]

    public init() {}

    /// Adds `amount` of `quota` to what `uid` holds; nothing for `nil` (the daemon's own).
    public mutating func charge(_ quota: Quota, to uid: UInt32?, _ amount: UInt64 = 1) {
        guard let uid, amount > 0 else { return }
        used[uid, default: [:]][quota, default: 0] &+= amount
    }

    /// Takes `amount` of `quota` off what `uid` holds (never below zero).
    public mutating func release(_ quota: Quota, from uid: UInt32?, _ amount: UInt64 = 1) {
        guard let uid, amount > 0, let held = used[uid]?[quota] else { return }
        if held > amount {
            used[uid]![quota] = held - amount
        } else {
            used[uid]![quota] = nil
            if used[uid]!.isEmpty { used[uid] = nil }
        }
    }

    /// How much of `quota` `uid` holds.
    public func used(_ quota: Quota, by uid: UInt32) -> UInt64 { used[uid]?[quota] ?? 0 }

    /// Everything `uid` holds, by quota (only what is above zero).
    public func usage(of uid: UInt32) -> [Quota: UInt64] { used[uid] ?? [:] }

    /// Whether no uid holds anything.
    public var isEmpty: Bool { used.isEmpty }

    /// The uids that hold anything.
    public var principals: Set<UInt32> { Set(used.keys) }

    /// Both ledgers' holdings together.
    public func merging(_ other: UsageLedger) -> UsageLedger {
        var result = self
        for (uid, quotas) in other.used {
            for (quota, amount) in quotas { result.charge(quota, to: uid, amount) }
        }
        return result
    }
}
