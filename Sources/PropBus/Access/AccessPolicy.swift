import DBusValues

/// Who may write and read which property (docs/security.md), decided from a caller's credentials.
///
/// - Root and the daemon's own user may do everything.
/// - Without a `writers` option, writers are root and the members of the `propbus` group
///   (only root when there is no such group).
/// - A `writers` option replaces that set: user names, `@group` names and numeric uids (and
///   `@gid`), which may widen or narrow it. A name that does not resolve matches nobody.
/// - A `secret` property is readable only by its writers; any other property by everyone.
///
/// Off (``open``), everyone may do everything: the session bus, reachable by one user only.
/// Pure apart from ``Accounts``, which resolves names on each check so that users and groups
/// made after startup count.
public struct AccessPolicy: Sendable {
    /// Whether the rules apply; when `false` every check passes.
    public var isEnabled: Bool
    /// The daemon's own uid, which is as privileged as root.
    public var daemonUserID: UInt32
    /// The default writers' group, when it exists.
    public var writerGroup: (name: String, id: UInt32)?
    /// How names in `writers` are resolved.
    public var accounts: Accounts

    /// The name of the default writers' group.
    public static let writerGroupName = "propbus"

    /// Everything allowed, for everyone.
    public static let open = AccessPolicy(isEnabled: false, daemonUserID: 0, writerGroup: nil, accounts: .table(users: [:], groups: [:]))

    public init(isEnabled: Bool = true, daemonUserID: UInt32, writerGroup: (name: String, id: UInt32)?, accounts: Accounts) {
        self.isEnabled = isEnabled
        self.daemonUserID = daemonUserID
        self.writerGroup = writerGroup
        self.accounts = accounts
    }

    /// The rules in force for a daemon running as `daemonUserID`, with the `propbus` group
    /// resolved now (at startup).
    public static func enforcing(daemonUserID: UInt32, accounts: Accounts) -> AccessPolicy {
        let group = accounts.groupID(writerGroupName).map { (name: writerGroupName, id: $0) }
        return AccessPolicy(daemonUserID: daemonUserID, writerGroup: group, accounts: accounts)
    }

    // MARK: Decisions

    /// Whether `caller` is root or the daemon's own user.
    public func isPrivileged(_ caller: Credentials?) -> Bool {
        guard isEnabled else { return true }
        guard let caller else { return false }
        return caller.userID == 0 || caller.userID == daemonUserID
    }

    /// Whether `caller` may write something whose `writers` option is `writers` (`nil`: none).
    public func mayWrite(writers: [String]?, caller: Credentials?) -> Bool {
        if isPrivileged(caller) { return true }
        guard let caller else { return false }
        guard let writers else {
            return writerGroup.map { caller.groupIDs.contains($0.id) } ?? false
        }
        return writers.contains { matches($0, caller) }
    }

    /// Whether `caller` may read a property: anyone, unless it is secret.
    public func mayRead(writers: [String]?, secret: Bool, caller: Credentials?) -> Bool {
        !secret || mayWrite(writers: writers, caller: caller)
    }

    /// Whether one `writers` entry names `caller`.
    private func matches(_ entry: String, _ caller: Credentials) -> Bool {
        Self.entry(entry, names: caller, accounts: accounts)
    }

    /// Whether one entry of a names list (`writers`, a lock's `"for"`: a user name, a uid,
    /// `@group` or `@gid`) names `caller`, resolved through `accounts` now.
    static func entry(_ entry: String, names caller: Credentials, accounts: Accounts) -> Bool {
        if entry.hasPrefix("@") {
            let name = String(entry.dropFirst())
            guard let gid = accounts.groupID(name) ?? Self.number(name) else { return false }
            return caller.groupIDs.contains(gid)
        }
        guard let uid = Self.number(entry) ?? accounts.userID(entry) else { return false }
        return caller.userID == uid
    }

    /// A decimal id; names are looked up first for groups, since a group may be named by digits.
    private static func number(_ text: String) -> UInt32? {
        guard !text.isEmpty, text.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return UInt32(text)
    }

    // MARK: Checks

    /// Throws `AccessDenied` naming `key` and the caller unless `caller` may write it.
    public func checkWrite(_ key: String, writers: [String]?, caller: Credentials?) throws(PropBusError) {
        guard !mayWrite(writers: writers, caller: caller) else { return }
        throw PropBusError(.accessDenied, "\(Self.describe(caller)) may not write \(key); writers are \(describeWriters(writers))")
    }

    /// Throws `AccessDenied` naming `key` and the caller unless `caller` may read it.
    public func checkRead(_ key: String, writers: [String]?, secret: Bool, caller: Credentials?) throws(PropBusError) {
        guard !mayRead(writers: writers, secret: secret, caller: caller) else { return }
        throw PropBusError(.accessDenied, "\(Self.describe(caller)) may not read \(key): it is secret, readable by its writers only, and writers are \(describeWriters(writers))")
    }

    /// "uid 1000", for messages.
    public static func describe(_ caller: Credentials?) -> String {
        caller.map { "uid \($0.userID)" } ?? "a caller of unknown uid"
    }

    /// Who may write, in words: "root and group propbus", "root and nobody, @audio".
    public func describeWriters(_ writers: [String]?) -> String {
        var names = ["root"]
        if daemonUserID != 0 { names.append("the daemon's user (uid \(daemonUserID))") }
        if let writers {
            // An entry naming root or the daemon's user says nothing more; each one once.
            var seen: Set<String> = []
            for entry in writers where seen.insert(entry).inserted {
                let uid = entry.hasPrefix("@") ? nil : Self.number(entry) ?? accounts.userID(entry)
                if uid == 0 || uid == daemonUserID { continue }
                names.append(entry)
            }
        } else if let writerGroup {
            names.append("group \(writerGroup.name)")
        }
        if names.count == 1 { return writers == nil ? "root only (there is no group \(Self.writerGroupName))" : "root only" }
        return names.dropLast().joined(separator: ", ") + " and " + names.last!
    }
}
