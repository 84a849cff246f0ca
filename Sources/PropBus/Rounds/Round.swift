import DBusValues

/// One dispatch round's transaction over the whole model: the property entries and bindings
/// (``PropertyModel``'s journal, a ``Transaction``), the command definitions (``CommandTable``)
/// and the rows to store (``PropertyModel/storeChanges``), committed or rolled back together.
///
/// The round begins at the previous ``end()``; handlers stage their changes through the model
/// and the command table as usual; ``end()`` makes them durable, or undoes every part and says
/// what the owner must bring back in line (exported objects, executions). The fleet work maps
/// one round to one etcd transaction: ``writtenKeys`` is its write set, ``readKeys`` what its
/// transforms read.
///
/// Confined to the owner's queue, like the model.
public final class Round {
    /// What a round that could not commit leaves to its owner.
    public struct Rollback {
        /// Why the store refused the commit.
        public var error: PropBusError
        /// Keys whose entries changed and were put back: their groups may have to be exported
        /// or unexported again.
        public var touchedKeys: [Key]
        /// Executions of commands the rollback removed: the owner must stop them.
        public var orphanedExecutions: [CommandTable.Execution]
    }

    public let model: PropertyModel
    public let commands: CommandTable?
    public let store: PropertyStore

    public init(model: PropertyModel, commands: CommandTable?, store: PropertyStore) {
        self.model = model
        self.commands = commands
        self.store = store
    }

    /// The keys whose entries the round changed (created, written, reset or deleted) so far.
    public var writtenKeys: Set<Key> { model.keysChangedThisRound }
    /// The keys whose values the round's bindings read so far: transform inputs and the bound
    /// keys compared before being written. With ``writtenKeys``, what a transaction must check
    /// has not changed underneath it.
    public var readKeys: Set<Key> { model.keysReadThisRound }

    /// Ends the round: commits the store, then forgets the model's journal and the command
    /// table's undo state, so the next round begins. Returns `nil` when committed.
    ///
    /// When the store refuses, everything goes back to the last commit: the model its entries,
    /// bindings and rows to store, the table its definitions.
    public func end() -> Rollback? {
        do {
            // The round's changes as a value: the store records them (history) with the values.
            let writeSet = model.takeWriteSet()
            try store.commit(writeSet, durability: writeSet.store.durability)
            model.commitRound()
            model.endWriteSet()
            commands?.commitRound()
            return nil
        } catch {
            return rollback(because: error)
        }
    }

    /// Undoes the round in every part (the model first: the table's rollback reads it).
    @discardableResult
    public func rollback(because error: PropBusError) -> Rollback {
        let touched = model.rollbackRound()
        let orphaned = commands?.rollbackRound() ?? []
        return Rollback(error: error, touchedKeys: touched, orphanedExecutions: orphaned)
    }
}
