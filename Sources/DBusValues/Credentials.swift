/// Who is at the other end of a connection, as the bus saw it when the connection was made
/// (`org.freedesktop.DBus.GetConnectionCredentials`).
public struct Credentials: Hashable, Sendable {
    /// `UnixUserID`: the connecting process's effective uid.
    public var userID: UInt32
    /// `UnixGroupIDs`, or the user's groups from the group database when the bus did not say.
    public var groupIDs: [UInt32]
    /// `ProcessID`, when the bus knows it.
    public var processID: UInt32?

    public init(userID: UInt32, groupIDs: [UInt32], processID: UInt32? = nil) {
        self.userID = userID
        self.groupIDs = groupIDs
        self.processID = processID
    }
}
