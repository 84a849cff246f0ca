import DBusValues

/// The layers a key's value can come from, top-down; the first that holds a value wins.
///
/// The user's value (the store) is one layer among six: above it the administrator's mandatory
/// files and the overrides running programs hold, below it the site's and the vendor's default
/// files and, last, the definition's own default. A key without layer files or overrides carries
/// no `ValueLayers` at all (``PropertyModel/Entry/layers`` is `nil`), so the common case costs
/// one pointer per entry.
public enum ValueLayer: String, Sendable, Hashable, CaseIterable {
    /// `mandatory.d`: the administrator's locks.
    case mandatory
    /// A value a running program holds while it lives (`Override`).
    case override
    /// The store: what `Set`, `Apply`, bindings … wrote.
    case user
    /// `defaults.d` under the configuration directory.
    case site
    /// `defaults.d` under the vendor directory.
    case vendor
    /// The definition's `default`.
    case `default`
}

/// A value a layer file gives a key, and which file.
public struct LayerValue: Sendable, Hashable {
    public var value: DBusValue
    /// The file that gives it (a path), for `describe`'s `source` and for error texts.
    public var source: String

    public init(value: DBusValue, source: String) {
        self.value = value
        self.source = source
    }
}

/// A mandatory value: the key's value, and a lock on it.
public struct MandatoryValue: Sendable, Hashable {
    public var value: LayerValue
    /// Whom the lock refuses (`"for"` in the file: user names and `@group`s); `nil`: everyone
    /// but privileged callers.
    public var lockedFor: [String]?

    public init(value: LayerValue, lockedFor: [String]? = nil) {
        self.value = value
        self.lockedFor = lockedFor
    }
}

/// One holder's override of a key.
public struct OverrideHold: Sendable, Hashable {
    /// The handle `Override` returned; unique for the daemon's lifetime and across restarts.
    public var handle: UInt64
    public var value: DBusValue
    /// Who holds it, for `describe` (unique bus name, pid, comm).
    public var holder: String
    /// When it was taken, nanoseconds since the epoch (UTC).
    public var since: UInt64
    /// When it ends by itself, nanoseconds since the epoch (UTC); `nil`: with its holder only.
    public var expires: UInt64?
    /// The holder's uid (charged with it, ``Quota/overrides``), pid and `/proc/PID/comm` when it
    /// began, for `describe`; `nil` when not known (access checks off, no pid from the bus).
    public var userID: UInt32?
    public var processID: UInt32?
    public var command: String?

    public init(handle: UInt64, value: DBusValue, holder: String, since: UInt64, expires: UInt64? = nil,
                userID: UInt32? = nil, processID: UInt32? = nil, command: String? = nil) {
        self.handle = handle
        self.value = value
        self.holder = holder
        self.since = since
        self.expires = expires
        self.userID = userID
        self.processID = processID
        self.command = command
    }
}

/// What the layers other than the user's and the definition's give one key.
public struct ValueLayers: Sendable, Hashable {
    public var mandatory: MandatoryValue?
    /// Oldest first: the last one wins, and ending it falls back to the one before.
    public var overrides: [OverrideHold] = []
    public var site: LayerValue?
    public var vendor: LayerValue?
    /// A fleet key's mandatory value from etcd (`PREFIX/layers/mandatory/KEY`), the same on
    /// every host; its `source` is `fleet mandatory ETCDKEY`.
    public var fleetMandatory: MandatoryValue?
    /// A fleet key's default from etcd (`PREFIX/layers/defaults/KEY`), at the site's position.
    public var fleetDefault: LayerValue?

    public init(mandatory: MandatoryValue? = nil, overrides: [OverrideHold] = [], site: LayerValue? = nil, vendor: LayerValue? = nil,
                fleetMandatory: MandatoryValue? = nil, fleetDefault: LayerValue? = nil) {
        self.mandatory = mandatory
        self.overrides = overrides
        self.site = site
        self.vendor = vendor
        self.fleetMandatory = fleetMandatory
        self.fleetDefault = fleetDefault
    }

    /// True when no layer holds anything (the entry then drops its ``ValueLayers``).
    public var isEmpty: Bool {
        mandatory == nil && overrides.isEmpty && site == nil && vendor == nil && fleetMandatory == nil && fleetDefault == nil
    }

    /// The mandatory value in force, which locks the key: the fleet's or a file's. (Layer files
    /// never give a fleet key a value, so at most one of them holds one.)
    public var mandatoryInForce: MandatoryValue? { fleetMandatory ?? mandatory }

    /// The site-position default in force: the fleet's or a `defaults.d` file's.
    public var siteInForce: LayerValue? { fleetDefault ?? site }

    /// The value clients see and the layer it comes from, given the user's value and the
    /// definition's default.
    public func effective(stored: DBusValue?, defaultValue: DBusValue) -> (value: DBusValue, layer: ValueLayer) {
        if let mandatory = mandatoryInForce { return (mandatory.value.value, .mandatory) }
        if let top = overrides.last { return (top.value, .override) }
        if let stored { return (stored, .user) }
        if let site = siteInForce { return (site.value, .site) }
        if let vendor { return (vendor.value, .vendor) }
        return (defaultValue, .default)
    }

    /// The value the key reads when the user's value is removed (`Reset`): the highest layer
    /// below the user's.
    public func fallback(defaultValue: DBusValue) -> DBusValue {
        siteInForce?.value ?? vendor?.value ?? defaultValue
    }
}

extension ValueLayers {
    /// The file a key's change of file layers is due to: the top file layer that changed, by
    /// the file it takes its value from now, or the one it lost (an unlock names the mandatory
    /// file, not the default the key reads afterwards).
    static func changedFile(from old: ValueLayers?, to new: ValueLayers?) -> String {
        if old?.mandatory != new?.mandatory { return new?.mandatory?.value.source ?? old?.mandatory?.value.source ?? "" }
        if old?.site != new?.site { return new?.site?.source ?? old?.site?.source ?? "" }
        return new?.vendor?.source ?? old?.vendor?.source ?? ""
    }
}
