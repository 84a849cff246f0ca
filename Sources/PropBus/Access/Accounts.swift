/// Resolves the user and group names that access rules mention (`writers`, the `propbus`
/// group): the system's databases in the daemon (``Accounts/system``, in PropBusSystem: the
/// core reads no database), a fixed table in tests.
public struct Accounts: Sendable {
    /// The uid of a user name, `nil` if no such user.
    public var userID: @Sendable (String) -> UInt32?
    /// The gid of a group name, `nil` if no such group.
    public var groupID: @Sendable (String) -> UInt32?
    /// The groups a uid belongs to now (primary and supplementary), for acts that outlive the
    /// call that made them (a binding acts with its principal's groups of the moment).
    public var groupsOfUser: @Sendable (UInt32) -> [UInt32]

    public init(userID: @escaping @Sendable (String) -> UInt32?, groupID: @escaping @Sendable (String) -> UInt32?,
                groupsOfUser: @escaping @Sendable (UInt32) -> [UInt32] = { _ in [] }) {
        self.userID = userID
        self.groupID = groupID
        self.groupsOfUser = groupsOfUser
    }

    /// The groups `uid` belongs to now; empty for an unknown uid.
    public func groupIDs(ofUser uid: UInt32) -> [UInt32] { groupsOfUser(uid) }

    /// A fixed table, for tests: no database is read.
    public static func table(users: [String: UInt32], groups: [String: UInt32], memberships: [UInt32: [UInt32]] = [:]) -> Accounts {
        Accounts(userID: { users[$0] }, groupID: { groups[$0] }, groupsOfUser: { memberships[$0] ?? [] })
    }
}
