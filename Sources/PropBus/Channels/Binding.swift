import DBusValues

/// A daemon-side channel: `key` follows `to`, and, unless one-way, `to` follows `key`.
///
/// This is `RACChannelTo(view, key) = RACChannelTo(model, to)`: when the binding is made, `key`
/// takes `to`'s (mapped) value and nothing is written to `to`.
public struct Binding: Sendable, Hashable {
    /// Which way values flow.
    public enum Direction: String, Sendable, CaseIterable {
        /// Both ways (the default).
        case both
        /// From `to` to `key` only, like GSettings' `G_SETTINGS_BIND_GET`.
        case from
        /// From `key` to `to` only.
        case to
    }

    /// The binding's number, also its object path's last element.
    public var id: UInt64
    /// The following side.
    public var key: Key
    /// The leading side: it wins when the binding is made.
    public var to: Key
    public var direction: Direction
    /// Maps a value of `to` into `key`'s domain (`to_key`); identity when `nil`.
    public var toKey: Expression?
    /// Maps a value of `key` into `to`'s domain (`to_target`); identity when `nil`.
    public var toTarget: Expression?
    /// Whether the binding is stored and survives restarts.
    public var persistent: Bool
    /// The unique bus name of the connection that made it; a non-persistent binding ends with it.
    public var owner: String?
    /// The uid whose rights the binding acts with and whose quota it is charged to: the caller
    /// of `Bind`, kept in the store with a persistent binding. `nil` for the daemon's own
    /// bindings (model files), which act with the daemon's rights.
    public var principal: UInt32?

    public init(id: UInt64, key: Key, to: Key, direction: Direction = .both, toKey: Expression? = nil,
                toTarget: Expression? = nil, persistent: Bool = false, owner: String? = nil, principal: UInt32? = nil) {
        self.id = id
        self.key = key
        self.to = to
        self.direction = direction
        self.toKey = toKey
        self.toTarget = toTarget
        self.persistent = persistent
        self.owner = owner
        self.principal = principal
    }

    /// Whether changes of `to` reach `key`.
    public var flowsToKey: Bool { direction != .to }
    /// Whether changes of `key` reach `to`.
    public var flowsToTarget: Bool { direction != .from }

    /// The option names `Bind` accepts.
    public static var optionNames: [String] { BindOptions.names }

    /// The options dictionary of `ListBindings`: `Bind`'s, with the owner and the principal.
    public var options: [String: DBusValue] {
        var result = bindOptions.dictionary
        // A persistent binding belongs to no connection: it outlives the one that made it.
        if let owner, !persistent { result["owner"] = .string(owner) }
        if let principal { result["principal"] = .uint32(principal) }
        return result
    }

    /// Whether `other` binds the same keys the same way (direction and transforms).
    public func sameChannel(as other: Binding) -> Bool {
        key == other.key && to == other.to && direction == other.direction
            && toKey?.text == other.toKey?.text && toTarget?.text == other.toTarget?.text
    }
}
