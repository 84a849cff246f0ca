/// Resolves the user and group names that access rules mention (`writers`, the `propbus`
/// group): the system's databases in the daemon (``Accounts/system``, in PropBusSystem: the
/// core reads no database), a fixed table in tests.
public struct Accounts: Sendable {
    /// The uid of a user name, `nil` if no such user.
    public var userID: @Sendable (String) -> UInt32?
    /// The gid of a group name, `nil` if no such group.
    public var groupID: @Sendable (String) -> UInt32?

    public init(userID: @escaping @Sendable (String) -> UInt32?, groupID: @escaping @Sendable (String) -> UInt32?) {
        self.userID = userID
        self.groupID = groupID
    }

    /// A fixed table, for tests: no database is read.
    public static func table(users: [String: UInt32], groups: [String: UInt32]) -> Accounts {
        Accounts(userID: { users[$0] }, groupID: { groups[$0] })
    }
}
