import Glibc
import SystemKit

/// Reading credentials from the bus; the value itself is in DBusValues, where the access policy
/// (which links no libdbus) can use it.
extension Credentials {
    /// Reads a `GetConnectionCredentials` reply.
    ///
    /// Without `UnixGroupIDs` (older buses, or a bus that cannot read the peer's groups) the
    /// groups come from `getgrouplist(3)` for the user, which misses `setgroups` changes made
    /// by the process but is what a policy based on group membership means.
    public init(reply entries: [String: DBusValue]) throws(DBusError) {
        // Newer buses also send ProcessFD (a pidfd): received file descriptors are ours to close.
        for value in entries.values {
            if case .unixFD(let fd) = value.unwrappingVariant, fd >= 0 { close(fd) }
        }
        guard case .uint32(let uid)? = entries["UnixUserID"]?.unwrappingVariantOnce else {
            throw .failed("the bus did not report a UnixUserID")
        }
        let groupIDs: [UInt32]
        if case .array(_, let items)? = entries["UnixGroupIDs"]?.unwrappingVariantOnce {
            groupIDs = items.compactMap { if case .uint32(let gid) = $0 { gid } else { nil } }
        } else {
            groupIDs = Self.groups(ofUser: uid)
        }
        var processID: UInt32?
        if case .uint32(let pid)? = entries["ProcessID"]?.unwrappingVariantOnce { processID = pid }
        self.init(userID: uid, groupIDs: groupIDs, processID: processID)
    }

    /// The primary and supplementary groups of `uid` in the user and group databases
    /// (``UserDatabase/groupIDs(ofUser:)``); empty for a uid without a passwd entry.
    public static func groups(ofUser uid: UInt32) -> [UInt32] {
        UserDatabase.groupIDs(ofUser: uid)
    }
}
