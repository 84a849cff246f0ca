import Glibc

/// Resolves the user and group names that access rules mention (`writers`, the `propbus`
/// group): the system's databases in the daemon, a fixed table in tests.
public struct Accounts: Sendable {
    /// The uid of a user name, `nil` if no such user.
    public var userID: @Sendable (String) -> UInt32?
    /// The gid of a group name, `nil` if no such group.
    public var groupID: @Sendable (String) -> UInt32?

    public init(userID: @escaping @Sendable (String) -> UInt32?, groupID: @escaping @Sendable (String) -> UInt32?) {
        self.userID = userID
        self.groupID = groupID
    }

    /// The user and group databases (`getpwnam_r`, `getgrnam_r`, so through NSS).
    public static let system = Accounts(userID: { name in
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16384)
        guard getpwnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return entry.pw_uid
    }, groupID: { name in
        var entry = group()
        var result: UnsafeMutablePointer<group>?
        // Large groups list many members; the buffer holds them all or the lookup fails (ERANGE).
        var buffer = [CChar](repeating: 0, count: 65536)
        guard getgrnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return entry.gr_gid
    })

    /// A fixed table, for tests: no database is read.
    public static func table(users: [String: UInt32], groups: [String: UInt32]) -> Accounts {
        Accounts(userID: { users[$0] }, groupID: { groups[$0] })
    }
}
