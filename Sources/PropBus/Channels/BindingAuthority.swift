import DBusValues

/// Decides, each time a binding acts (every propagation, every start) or a command's
/// `enabled_when` is evaluated, whether its principal may still read or write a key: rights
/// are checked when an act takes effect, not only when `Bind` or `CreateCommand` was called,
/// so a key made secret later, or writers narrowed later, stop the binding or the predicate.
///
/// Pure: the daemon builds one from its ``AccessPolicy`` (``enforcing(_:)``), whose ``Accounts``
/// resolve the principal's groups at each check, so a user removed from a group loses its
/// rights at the next check.
public struct BindingAuthority: Sendable {
    /// What a binding does to a key.
    public enum Access: Sendable {
        /// Reads its value: the leading side, or a key a transform names.
        case read
        /// Writes its value: the following side.
        case write
    }

    /// One thing a binding (or a predicate) does to a property.
    public struct Use: Sendable {
        public var definition: PropertyDefinition
        public var access: Access

        public init(_ definition: PropertyDefinition, _ access: Access) {
            self.definition = definition
            self.access = access
        }
    }

    /// Why `principal` may not make the first of `uses` it may not, in words that name the uid
    /// and the key and never a value; `nil` when it may make them all. One call per act, so the
    /// principal's groups are looked up once for all its uses.
    public var denial: @Sendable (_ principal: UInt32, _ uses: [Use]) -> String?
    /// Whether `principal` may do everything (root, the daemon's user): nothing of its acts need
    /// be gathered and checked, which keeps root's bindings as cheap as the daemon's own.
    public var isExempt: @Sendable (_ principal: UInt32) -> Bool

    public init(isExempt: @escaping @Sendable (_ principal: UInt32) -> Bool = { _ in false },
                denial: @escaping @Sendable (_ principal: UInt32, _ uses: [Use]) -> String?) {
        self.isExempt = isExempt
        self.denial = denial
    }

    /// The rules of `policy`; `nil` when the policy is off (everything is allowed, and nothing
    /// need be checked).
    public static func enforcing(_ policy: AccessPolicy) -> BindingAuthority? {
        guard policy.isEnabled else { return nil }
        return BindingAuthority(isExempt: { policy.isPrivileged(Credentials(userID: $0, groupIDs: [])) }) { principal, uses in
            let bare = Credentials(userID: principal, groupIDs: [])
            if policy.isPrivileged(bare) { return nil }
            // Looked up at the first use that needs them: the default writers (the propbus
            // group) and @group entries; user names and uids need none.
            var withGroups: Credentials?
            for use in uses {
                let definition = use.definition
                if use.access == .read, !definition.secret { continue }
                var caller = bare
                if definition.writers?.contains(where: { $0.hasPrefix("@") }) ?? true {
                    if withGroups == nil { withGroups = Credentials(userID: principal, groupIDs: policy.accounts.groupIDs(ofUser: principal)) }
                    caller = withGroups!
                }
                do throws(PropBusError) {
                    switch use.access {
                    case .read: try policy.checkRead(definition.key.text, writers: definition.writers, secret: definition.secret, caller: caller)
                    case .write: try policy.checkWrite(definition.key.text, writers: definition.writers, caller: caller)
                    }
                } catch {
                    return error.message
                }
            }
            return nil
        }
    }
}
