import DBusValues

// MARK: Layer files

extension PropertyModel {
    /// What the layer files give one key: its mandatory, site and vendor values, and the
    /// entries its definition refuses.
    struct ResolvedLayers {
        var mandatory: MandatoryValue?
        var site: LayerValue?
        var vendor: LayerValue?
        var problems: [LayerProblem] = []

        /// `current` with these in place of its file layers (its overrides are kept).
        func layers(over current: ValueLayers?) -> ValueLayers? {
            var layers = current ?? ValueLayers()
            layers.mandatory = mandatory
            layers.site = site
            layers.vendor = vendor
            return layers.isEmpty ? nil : layers
        }
    }

    /// Types and checks every entry of ``layerFiles`` that names `definition`'s key; a later
    /// entry of a layer wins. An entry the definition refuses is left out, with a problem.
    func resolveLayers(for definition: PropertyDefinition) -> ResolvedLayers {
        var resolved = ResolvedLayers()
        let key = definition.key
        for entry in layerFiles.entries where entry.target.matches(key) {
            func refuse(_ problem: String) {
                // A prefix's entry says so: the key alone would not tell which entry of the file it is.
                let which = if case .prefix = entry.target { "(from \(entry.target.text)) " } else { "" }
                resolved.problems.append(LayerProblem(file: entry.source, key: key.text, problem: which + problem + "; this entry is skipped"))
            }
            if definition.scope == .fleet {
                refuse("\(key) is a fleet key, whose value is the fleet's on every host: layer files do not apply to fleet keys")
                continue
            }
            if let command = definition.stateOf {
                refuse("\(key) is the state of command \(command), which only its executions change")
                continue
            }
            let value: DBusValue
            do { value = try ValueText.value(from: entry.value, as: definition.type) } catch {
                refuse("expected a '\(definition.type.signature)' (\(definition.type.name)) value: \(error.withoutValue)")
                continue
            }
            do { try definition.check(value, maximumSize: limits.maximumValueSize) } catch {
                refuse(error.message)
                continue
            }
            let layered = LayerValue(value: value, source: entry.source)
            switch entry.layer {
            case .mandatory: resolved.mandatory = MandatoryValue(value: layered, lockedFor: entry.lockedFor)
            case .site: resolved.site = layered
            default: resolved.vendor = layered
            }
        }
        return resolved
    }

    /// Puts `files` in force: every key they name, or named until now, takes its mandatory, site
    /// and vendor values from them; keys created later take theirs when created. Each key is
    /// changed with `origin` (a `Lock` call), or without one with the file whose entry for it
    /// came, went or changed as the origin (the top layer's that did: an unlock names the
    /// mandatory file it lost, not the default it reads now), so history shows who did what.
    /// A value that changes spreads through the bindings.
    ///
    /// Returns the changes to publish and the keys whose lock came, went or changed whom it
    /// refuses (their writability changed for someone).
    public func applyLayerFiles(_ files: LayerFileSet, origin changeOrigin: WriteSet.Origin? = nil) -> (changes: [PropertyChange], lockChanged: [Key]) {
        rememberLayerState()
        layerFiles = files
        var candidates = layeredKeys
        for entry in files.entries {
            switch entry.target {
            case .key(let key): if entries[key] != nil { candidates.insert(key) }
            case .prefix(let prefix): forEachEntry(withPrefix: prefix) { candidates.insert($0.definition.key) }
            }
        }
        var problems = files.problems
        var planned: [(key: Key, layers: ValueLayers?, file: String)] = []
        for key in candidates.sorted() {
            guard let entry = entries[key] else {
                layeredKeys.remove(key)
                continue
            }
            let resolved = resolveLayers(for: entry.definition)
            problems += resolved.problems
            let next = resolved.layers(over: entry.layers)
            guard next != entry.layers else { continue }
            planned.append((key, next, ValueLayers.changedFile(from: entry.layers, to: next)))
        }
        layerProblems = problems
        let previousOrigin = origin
        defer { origin = previousOrigin }
        var changes: [PropertyChange] = []
        var lockChanged: [Key] = []
        for (file, group) in Dictionary(grouping: planned, by: \.file).sorted(by: { $0.key < $1.key }) {
            origin = changeOrigin ?? .layerFile(path: file)
            for (key, layers, _) in group {
                let (changed, lockChange) = replaceLayers(of: key, with: layers, holding: [key])
                changes += changed
                if lockChange { lockChanged.append(key) }
            }
        }
        return (changes, lockChanged)
    }

    /// Gives `key`'s entry `layers`, under the open origin; returns the changes (its value's,
    /// spread through the bindings except into `held` keys) and whether its lock came, went or
    /// changed whom it refuses.
    func replaceLayers(of key: Key, with layers: ValueLayers?, holding held: Set<Key>) -> (changes: [PropertyChange], lockChanged: Bool) {
        guard var entry = entries[key] else { return ([], false) }
        let oldValue = entry.value, oldLock = entry.layers?.mandatoryInForce
        remember(key)
        entry.layers = layers
        revision += 1
        entry.revision = revision
        if entry.definition.persistent { saveRevisionCeiling() } else { reserveRevision() }
        insert(entry)
        // Kept when its layers go: a rolled-back round may bring them back.
        layeredKeys.insert(key)
        let newLock = layers?.mandatoryInForce
        let lockChanged = (oldLock == nil) != (newLock == nil) || oldLock?.lockedFor != newLock?.lockedFor
        let value = entry.value
        guard value != oldValue else { return ([], lockChanged) }
        var changes: [PropertyChange] = [.valueChanged(key, old: oldValue)]
        guard !bindings.isEmpty else { return (changes, lockChanged) }
        // The new value spreads as a redefinition's does; a target that refuses it keeps its own.
        if let propagated = try? propagation.expand([(key, value)], holding: held),
           let written = try? write(propagated.map { ($0.0, $0.1) }, holding: held) {
            changes += written
        }
        return (changes, lockChanged)
    }

    /// Puts a fleet key's layers from etcd in force (``ValueLayers/fleetMandatory``,
    /// ``ValueLayers/fleetDefault``), each key under its own origin (history names the etcd key
    /// and who wrote it). A value its definition refuses is left out, with a problem (for the
    /// log: the fleet's layers are not files this host can fix). A key that does not exist, or
    /// is not a fleet key here, is passed over: the fleet applies its layers when it defines it.
    /// A changed value spreads through the bindings into local keys only (`held`: the fleet
    /// keys bound here), as the fleet's values do.
    ///
    /// Returns the changes to publish, the keys whose lock changed, and the problems.
    public func applyFleetLayers(_ layers: [(key: Key, mandatory: MandatoryValue?, fleetDefault: LayerValue?, origin: WriteSet.Origin)],
                                 holding held: Set<Key>) -> (changes: [PropertyChange], lockChanged: [Key], problems: [String]) {
        let previousOrigin = origin
        defer { origin = previousOrigin }
        var changes: [PropertyChange] = [], lockChanged: [Key] = [], problems: [String] = []
        for item in layers {
            guard let entry = entries[item.key], entry.definition.scope == .fleet else { continue }
            func checked<Layer>(_ layer: Layer?, _ value: (Layer) -> DBusValue, _ name: String) -> Layer? {
                guard let layer else { return nil }
                do throws(PropBusError) { try entry.definition.check(value(layer), maximumSize: limits.maximumValueSize) } catch {
                    problems.append("the fleet \(name) of \(item.key) is skipped: \(error.message)")
                    return nil
                }
                return layer
            }
            var next = entry.layers ?? ValueLayers()
            next.fleetMandatory = checked(item.mandatory, \.value.value, "mandatory value")
            next.fleetDefault = checked(item.fleetDefault, \.value, "default")
            let nextLayers: ValueLayers? = next.isEmpty ? nil : next
            guard nextLayers != entry.layers else { continue }
            origin = item.origin
            let (changed, lockChange) = replaceLayers(of: item.key, with: nextLayers, holding: held.union([item.key]))
            changes += changed
            if lockChange { lockChanged.append(item.key) }
        }
        return (changes, lockChanged, problems)
    }

    /// Whether `entry` is locked for `userID` (`nil`: not known, the daemon's user): what its
    /// `writable` metadata and introspection tell that caller.
    public func isLocked(_ entry: borrowing Entry, forUser userID: UInt32?) -> Bool {
        guard let mandatory = entry.layers?.mandatoryInForce else { return false }
        return lockAuthority.locks(mandatory, userID: userID)
    }
}
