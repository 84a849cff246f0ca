import DBus
import PropBus

extension Service {
    /// `org.propbus.PropBus1.Manager` on the root object.
    func managerDescription() -> InterfaceDescription {
        InterfaceDescription(Self.managerInterface, methods: [
            MethodDescription("CreateProperty", in: [("key", .string), ("type", .string), ("default", .variant), ("options", .dictionary(key: .string, value: .variant))], writes: true, access: .create(.argument("key"))) { [unowned self] call throws(DBusError) in
                let key = try call.string("key"), type = try call.string("type")
                let defaultValue = try call.argument("default")
                var options = try call.dictionary("options")
                // Not the definition's: an ephemeral key's lifetime is a lease its creator holds.
                let lifetime = try options.removeValue(forKey: "lifetime").map { raw throws(DBusError) in
                    try bridged { () throws(PropBusError) in try Self.keyLifetime(raw, of: key) }
                }
                if let lifetime, let gate, isFleetScoped(key, options: options) {
                    // The gate's lease, taken first: the definition goes to the keys' owner attached to it.
                    try bridged { () throws(PropBusError) in try checkLifetime(of: key, options: options) }
                    let holder = leaseHolder(of: origin(of: call), call: call)
                    return try gate.createLeasedKey(call, key: key, lifetime: lifetime, holder: holder) { [unowned self] confirm throws(DBusError) in
                        try write(call, reply: { confirm(); return [] }) { [unowned self] () throws(PropBusError) in
                            try model.create(key: key, type: type, defaultValue: defaultValue, options: options, creator: call.credentials?.userID)
                        }
                    }
                }
                defer { if lifetime != nil { armLeaseTimer() } }
                return try write(call) { [unowned self] () throws(PropBusError) in
                    if lifetime != nil { try checkLifetime(of: key, options: options) }
                    let changes = try model.create(key: key, type: type, defaultValue: defaultValue, options: options, creator: call.credentials?.userID)
                    if let lifetime, let parsed = try? Key(key) {
                        let now = Self.wallClockNow()
                        model.addLifetime(to: parsed, holder: leaseHolder(of: model.origin, call: call), now: now, expires: lifetime.map { now + $0 })
                    }
                    return changes
                }
            },
            MethodDescription("DeleteProperty", in: [("key", .string)], writes: true, access: .write(.argument("key"))) { [unowned self] call throws(DBusError) in
                let key = try call.string("key")
                return try write(call) { [unowned self] () throws(PropBusError) in try model.delete(key: key) }
            },
            MethodDescription("ListProperties", in: [("prefix", .string)], out: [("properties", .array(.structure([.string, .string, .variant, .dictionary(key: .string, value: .variant)])))]) { [unowned self] call throws(DBusError) in
                // Secret values are left out for callers who may not read them.
                let prefix = try call.string("prefix")
                // Locks are decided for this caller, outside the walk, which may not touch the model.
                let lockAuthority = model.lockAuthority, callerID = call.credentials?.userID
                // Written straight into the reply from the model's entries (a 10k-property list
                // is 2 MB): no value tree, no entry copied.
                // Read here, not through `self` per row: the service's references are not free.
                let model = model, access = options.access, gate = gate
                // Marshalled into a buffer: libdbus's append per field was most of the listing's time.
                return .stream(ReplyBody(signature: "a(ssva{sv})") { writer in
                    var writers = WriterDecisions()
                    writer.array(of: "(ssva{sv})", alignment: 8) { items in
                        model.forEachEntry(withPrefix: prefix) { entry in
                            guard access.mayRead(writers: entry.definition.writers, secret: entry.definition.secret, caller: call.credentials) else { return }
                            items.structure { item in
                                // A lock, or the writers, refuse this caller the write the definition allows.
                                let locked = entry.layers?.mandatoryInForce.map { lockAuthority.locks($0, userID: callerID) } ?? false
                                    || !writers.mayWrite(entry.definition.writers) { access.mayWrite(writers: $0, caller: call.credentials) }
                                item.string(entry.definition.key.text)
                                item.string(entry.definition.type.signature)
                                item.variant(entry.value)
                                // The gate's own table, not the model: nothing here may touch the model.
                                Self.writeMetadata(of: entry, gateRevision: gate?.listedRevision(of: entry.definition),
                                                   lifetime: model.leases.keyLeases[entry.definition.key] ?? gate?.listedLifetime(of: entry.definition),
                                                   lockedForCaller: locked, to: &item)
                            }
                        }
                    }
                })
            },
            MethodDescription("ListPropertiesCompact", in: [("prefix", .string)], out: [
                ("properties", .array(.structure([.string, .uint32, .variant, .uint64, .boolean, .dictionary(key: .string, value: .variant)]))),
                ("shapes", .array(.structure([.string, .dictionary(key: .string, value: .variant)]))),
            ]) { [unowned self] call throws(DBusError) in try listPropertiesCompact(call) },
            MethodDescription("Apply", in: [("set", .dictionary(key: .string, value: .variant)), ("reset", .array(.string))], writes: true,
                              // Every key is checked before anything changes: one denial leaves all as it was.
                              access: .write(.arguments(["set", "reset"]))) { [unowned self] call throws(DBusError) in
                // In the order sent (a dictionary would lose it): the model applies them in turn.
                guard case .dictionary(_, _, let entries) = try call.argument("set") else { throw .invalidArgs("Apply expects (a{sv} set, as reset)") }
                let assignments = entries.compactMap { entry in entry.key.stringValue.map { ($0, entry.value.unwrappingVariantOnce) } }
                let resets = try call.strings("reset")
                return try write(call) { [unowned self] () throws(PropBusError) in
                    try model.apply(set: assignments, reset: resets)
                }
            },
        ] + overrideMethods() + bindingMethods() + commandMethods() + modelFileMethods() + lockMethods() + usageMethods() + historyMethods()
          + (managerExtension?.managerMethods() ?? []), properties: .fixed((managerExtension?.managerProperties() ?? []) + [
            PropertyDescription("Version", type: .string, changeSignal: .const) { .string(Self.version) },
            PropertyDescription("SkippedModelFiles", type: .array(.structure([.string, .string]))) { [unowned self] in
                Self.skippedList(skippedModelFiles + Self.skipped(model.layerProblems))
            },
            PropertyDescription("ConfigDirectory", type: .string, changeSignal: .const) { [unowned self] in
                .string(options.configDirectory ?? "")
            },
        ]), signals: [
            // Writability changed for someone (a lock came, went or changed whom it refuses):
            // introspection and the `writable` metadata say something else now.
            SignalDescription("LocksChanged", [("keys", .array(.string))]),
        ])
    }

    /// Writes a property's `ListProperties` metadata: ``PropertyDefinition/metadata`` with the
    /// entry's own keys (`is_set`, `revision`, `hidden_*`, the gate's revision, `overrides`, an
    /// ephemeral key's `lifetime`), sorted by key, without
    /// building a dictionary (one per property). ListPropertiesMetadataTests check it against the
    /// dictionary built from ``PropertyDefinition/metadata``, so a key added there must be added here.
    ///
    /// With layer values (docs/layers.md), also `layer`, `layer_source` (the file), `locked` and,
    /// when a layer above hides it, `user_value`; `writable` is false for a caller a lock or the
    /// key's writers refuse.
    static func writeMetadata(of entry: borrowing PropertyModel.Entry, gateRevision: Int64? = nil, lifetime: Lease? = nil,
                              lockedForCaller: Bool = false, to writer: inout MessageBodyWriter) {
        writeMetadata(of: entry.definition, perEntry: EntryMetadata(entry, gateRevision: gateRevision, lifetime: lifetime,
                                                                    lockedForCaller: lockedForCaller), to: &writer)
    }

    /// An entry's own `ListProperties` metadata, beside its definition's.
    struct EntryMetadata {
        var isSet: Bool
        var revision: UInt64
        var hidden: PropertyModel.HiddenValue?
        /// The revision the gate's keys' owner holds (``WriteGate/listedRevision(of:)``).
        var gateRevision: Int64?
        /// Its name in the metadata, a name of the D-Bus API (docs/dbus-api.md): sorted between
        /// `description` and `hidden_reason`.
        static let gateRevisionName = "etcd_revision"
        /// The entry's layers, when any layer holds something for it.
        var layers: LayerMetadata?
        /// An ephemeral key's lease.
        var lifetime: Lease?
        /// Whether a lock refuses the caller the write the definition allows.
        var lockedForCaller: Bool

        init(_ entry: borrowing PropertyModel.Entry, gateRevision: Int64?, lifetime: Lease?, lockedForCaller: Bool) {
            isSet = entry.storedValue != nil
            revision = entry.revision
            hidden = entry.hidden
            self.gateRevision = gateRevision
            layers = entry.layers.map { LayerMetadata(entry, $0) }
            self.lifetime = lifetime
            self.lockedForCaller = lockedForCaller
        }

        /// `layer`, `layer_source`, `lifetime` and `locked`, which sort together.
        func writeLayerFields(to items: inout MessageBodyWriter) {
            if let layers {
                items.entry("layer", string: layers.layer.rawValue)
                if let source = layers.source { items.entry("layer_source", string: source) }
            }
            if let lifetime { items.entry("lifetime", Service.lifetimeMetadata(lifetime)) }
            if let layers { items.entry("locked", boolean: layers.locked) }
        }

        /// `overrides`, when any holds.
        func writeOverrides(secret: Bool, to items: inout MessageBodyWriter) {
            guard let overrides = layers?.overrides, !overrides.isEmpty else { return }
            items.entry("overrides", Service.overridesMetadata(overrides, secret: secret))
        }
    }

    /// What ``ValueLayers`` tell of an entry: `layer`, `layer_source`, `locked`, `user_value`.
    struct LayerMetadata {
        var layer: ValueLayer
        var source: String?
        var locked: Bool
        /// The user's own value, kept while a layer above hides it.
        var userValue: DBusValue?
        /// The holders, oldest first.
        var overrides: [OverrideHold]

        init(_ entry: borrowing PropertyModel.Entry, _ layers: ValueLayers) {
            layer = entry.valueLayer
            source = switch layer {
            case .mandatory: layers.mandatoryInForce?.value.source
            case .site: layers.siteInForce?.source
            case .vendor: layers.vendor?.source
            case .override: layers.overrides.last?.holder
            default: nil
            }
            locked = layers.mandatoryInForce != nil
            userValue = layer == .mandatory || layer == .override ? entry.storedValue : nil
            overrides = layers.overrides
        }
    }

    /// Writes the metadata of `definition` and, unless `nil`, the entry's own keys, sorted by key:
    /// without them, the shape of `ListPropertiesCompact`.
    static func writeMetadata(of definition: PropertyDefinition, perEntry entry: EntryMetadata?, to writer: inout MessageBodyWriter) {
        writer.dictionary("{sv}") { items in
            // Sorted by key, as `DBusValue.vardict` sorts them.
            if let choices = definition.choices { items.entry("choices", .array(of: .variant, choices.map { .variant($0) })) }
            items.entry("default", definition.defaultValue)
            items.entry("description", string: definition.description)
            if let gateRevision = entry?.gateRevision { items.entry(EntryMetadata.gateRevisionName, .int64(gateRevision)) }
            if let hidden = entry?.hidden {
                items.entry("hidden_reason", string: hidden.reason)
                if PropertyDefinition.canSendBack(hidden.value) { items.entry("hidden_value", hidden.value) }
            }
            if let entry { items.entry("is_set", boolean: entry.isSet) }
            entry?.writeLayerFields(to: &items)
            if let maximum = definition.maximum { items.entry("maximum", maximum) }
            if let minimum = definition.minimum { items.entry("minimum", minimum) }
            entry?.writeOverrides(secret: definition.secret, to: &items)
            items.entry("persistent", boolean: definition.persistent)
            if let entry { items.entry("revision", uint64: entry.revision) }
            // Only when shared, as `PropertyDefinition.metadata` says it.
            if definition.scope == .fleet { items.entry("scope", string: definition.scope.rawValue) }
            items.entry("secret", boolean: definition.secret)
            if let source = definition.source { items.entry("source", string: source) }
            if let stateOf = definition.stateOf { items.entry("state_of", string: stateOf.text) }
            if let userValue = entry?.layers?.userValue { items.entry("user_value", userValue) }
            items.entry("writable", boolean: definition.writable && !(entry?.lockedForCaller ?? false))
            if let writers = definition.writers { items.entry("writers", .array(of: .string, writers.map { .string($0) })) }
        }
    }
}
