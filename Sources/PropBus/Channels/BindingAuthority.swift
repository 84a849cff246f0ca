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

    /// Why `principal` may not have `access` to the property `definition`, in words that name
    /// the uid and the key and never a value; `nil` when it may.
    public var denial: @Sendable (_ principal: UInt32, _ definition: PropertyDefinition, _ access: Access) -> String?

    public init(denial: @escaping @Sendable (_ principal: UInt32, _ definition: PropertyDefinition, _ access: Access) -> String?) {
        self.denial = denial
    }

    /// The rules of `policy`; `nil` when the policy is off (everything is allowed, and nothing
    /// need be checked).
    public static func enforcing(_ policy: AccessPolicy) -> BindingAuthority? {
        guard policy.isEnabled else { return nil }
        return BindingAuthority { principal, definition, access in
            let bare = Credentials(userID: principal, groupIDs: [])
            if policy.isPrivileged(bare) { return nil }
            if access == .read, !definition.secret { return nil }
            // Groups only matter to the default writers (the propbus group) and to @group entries.
            let needsGroups = definition.writers?.contains { $0.hasPrefix("@") } ?? true
            let caller = needsGroups ? Credentials(userID: principal, groupIDs: policy.accounts.groupIDs(ofUser: principal)) : bare
            do throws(PropBusError) {
                switch access {
                case .read: try policy.checkRead(definition.key.text, writers: definition.writers, secret: definition.secret, caller: caller)
                case .write: try policy.checkWrite(definition.key.text, writers: definition.writers, caller: caller)
                }
            } catch {
                return error.message
            }
            return nil
        }
    }
}
