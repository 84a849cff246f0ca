import Glibc
import PropBus
import SystemKit

extension Accounts {
    /// The user and group databases (`getpwnam_r`, `getgrnam_r`, `getgrouplist`, so through NSS).
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
    }, groupsOfUser: { UserDatabase.groupIDs(ofUser: $0) })
}
