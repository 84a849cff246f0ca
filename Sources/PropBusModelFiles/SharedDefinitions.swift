import PropBus

/// Definitions that are not this host's model files' to change: with `--fleet`, those of the
/// fleet's keys. A model file may declare such a key only as it is defined, and its
/// `value` does not apply to it: either would change the key on this host only.
public struct SharedDefinitions {
    /// Whether `definition`, as the model holds it now, is shared.
    public var contains: (PropertyDefinition) -> Bool
    /// Why `declared` may not replace `current` (a shared definition), or nil when the two are
    /// the same for their owner (host-local parts such as `source` aside).
    public var refusal: (_ current: PropertyDefinition, _ declared: PropertyDefinition) -> String?

    public init(contains: @escaping (PropertyDefinition) -> Bool,
                refusal: @escaping (_ current: PropertyDefinition, _ declared: PropertyDefinition) -> String?) {
        self.contains = contains
        self.refusal = refusal
    }
}
