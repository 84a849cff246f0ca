import PropBus

// The in-process service tests' stores (PropBusServiceTests, PropBusFleetTests).

/// A store whose next commit fails when asked to, as a full disk would.
public final class RefusingStore: PropertyStore, @unchecked Sendable {
    public var refuseNextCommit = false
    public func load() -> StoredState { StoredState() }
    /// Refuses the next commit that holds a change (an idle round's empty commit passes).
    public var refuseNextChange = false
    /// Commits that held a change.
    public var changeCommits = 0
    /// Runs before each commit that holds a change (on the service's queue).
    public var beforeChangeCommit: (() -> Void)?

    /// A store that refuses nothing until told to.
    public init() {}

    public func commit(_ writeSet: WriteSet, durability: StoreChanges.Durability) throws(PropBusError) {
        if !writeSet.isEmpty {
            changeCommits += 1
            beforeChangeCommit?()
        }
        if refuseNextChange, !writeSet.isEmpty {
            refuseNextChange = false
            throw PropBusError(.storeFailed, "cannot commit: No space left on device")
        }
        guard refuseNextCommit else { return }
        refuseNextCommit = false
        throw PropBusError(.storeFailed, "cannot commit: No space left on device")
    }
}
