import Glibc
import SystemKit

extension RenderDeclaration {
    /// The owner, group and mode the file gets, with names looked up now (`getpwnam_r`,
    /// `getgrnam_r`), so a user created after the model file was read counts.
    ///
    /// No owner: propbusd's own user; no group: the owner's primary group (propbusd's group
    /// when the owner is not given).
    public func resolvedOwnership() throws(InstallError) -> FileSystem.Ownership {
        var userID = geteuid(), groupID = getegid()
        switch owner {
        case nil:
            break
        case .id(let id):
            userID = id
            groupID = Self.primaryGroup(ofUser: id) ?? groupID
        case .name(let name):
            guard let user = Self.user(named: name) else { throw InstallError("there is no user named \(name) (the owner of \(destination))") }
            (userID, groupID) = user
        }
        switch group {
        case nil:
            break
        case .id(let id):
            groupID = id
        case .name(let name):
            guard let id = Self.group(named: name) else { throw InstallError("there is no group named \(name) (the group of \(destination))") }
            groupID = id
        }
        return FileSystem.Ownership(userID: userID, groupID: groupID, mode: mode)
    }

    static func user(named name: String) -> (UInt32, UInt32)? {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16384)
        guard getpwnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return (entry.pw_uid, entry.pw_gid)
    }

    static func primaryGroup(ofUser uid: UInt32) -> UInt32? {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16384)
        guard getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return entry.pw_gid
    }

    static func group(named name: String) -> UInt32? {
        var entry = Glibc.group()
        var result: UnsafeMutablePointer<Glibc.group>?
        var buffer = [CChar](repeating: 0, count: 65536)
        guard getgrnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return entry.gr_gid
    }
}
