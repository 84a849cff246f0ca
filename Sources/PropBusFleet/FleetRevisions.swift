import PropBus

/// A fleet key's etcd `mod_revision`s: of its value (`PREFIX/keys/KEY`) and of its
/// definition (`PREFIX/defs/KEY`); negative: deleted at that revision. The store keeps them as
/// the round's external bookkeeping (``StoreChanges/externalRevisions``), without their meaning.
public typealias FleetRevisions = ExternalRevisions
