import Glibc

/// The user and group databases, as far as access rules need them.
public enum UserDatabase {
    /// The primary and supplementary groups of `uid` in the user and group databases
    /// (`getpwuid_r` + `getgrouplist`, so through NSS); empty for a uid without a passwd entry.
    public static func groupIDs(ofUser uid: UInt32) -> [UInt32] {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, result != nil, let name = entry.pw_name else {
            return []
        }
        let primary = entry.pw_gid
        var count: Int32 = 32
        while true {
            var groups = [gid_t](repeating: 0, count: Int(count))
            let capacity = count
            // On a short buffer getgrouplist returns -1 and stores the number it needs in count.
            if getgrouplist(name, primary, &groups, &count) >= 0 {
                return groups.prefix(Int(count)).map { UInt32($0) }
            }
            if count <= capacity { count = capacity * 2 }
        }
    }
}
