import DBus
import PropBus

/// Every write, create, delete and bind is checked against the caller's credentials
/// (``MethodCall/credentials``) with the service's ``AccessPolicy``; secret values are shown
/// only to their writers. With the policy off (the session bus) every check passes.
extension Service {
    /// The tree's ``ObjectTree/accessCheck``: what a method's description declares it needs.
    /// With the policy off every check passes, so nothing is looked up.
    func check(_ access: MethodAccess, _ call: MethodCall) throws(DBusError) {
        // `.create` passes write rights on an existing key, the default writers' rights for a
        // new one; `.privileged` always the default writers' (what has no writers list).
        guard options.access.isEnabled else { return }
        switch access {
        case .none: return
        case .read(let names): for name in try call.names(names) { try authorizeRead(existing: name, by: call) }
        case .write(let names, .command):
            for name in try call.names(names) {
                // An unknown command passes: the handler reports it as it would to anyone.
                guard let key = try? Key(name), let definition = commands.definition(of: key) else { continue }
                try authorizeWrite(name, writers: definition.writers, by: call)
            }
        case .write(let names, _):
            // A key that does not exist passes: the handler reports it as it would to anyone.
            for name in try call.names(names) { try authorizeWrite(existing: name, by: call) }
        case .create(let names): for name in try call.names(names) { try authorizeCreate(name, by: call) }
        case .privileged(let names): for name in try call.names(names) { try authorizeWrite(name, writers: nil, by: call) }
        case .custom(let check): try check(call)
        }
    }

    /// Throws `AccessDenied` naming `key` unless the caller of `call` may write it (docs/security.md, "Writing").
    ///
    /// `writers` is the `writers` option of the property or command, if it has one.
    func authorizeWrite(_ key: String, writers: [String]?, by call: MethodCall) throws(DBusError) {
        try bridged { () throws(PropBusError) in
            try options.access.checkWrite(key, writers: writers, caller: call.credentials)
        }
    }

    /// Writer rights on an existing property. A key that does not parse or does not exist
    /// passes, so that the model reports it as it would to anyone (keys are not secret).
    func authorizeWrite(existing keyText: String, by call: MethodCall) throws(DBusError) {
        guard options.access.isEnabled, let entry = existingEntry(keyText) else { return }
        try authorizeWrite(entry.definition.key.text, writers: entry.definition.writers, by: call)
    }

    /// `CreateProperty`: re-registering needs writer rights on the property, a new key the
    /// default writer rights (whatever `writers` the new property will have).
    func authorizeCreate(_ keyText: String, by call: MethodCall) throws(DBusError) {
        guard options.access.isEnabled else { return }
        if let entry = existingEntry(keyText) {
            try authorizeWrite(entry.definition.key.text, writers: entry.definition.writers, by: call)
        } else {
            try authorizeWrite(keyText, writers: nil, by: call)
        }
    }

    /// Reader rights on an existing property (only secret ones are restricted).
    func authorizeRead(existing keyText: String, by call: MethodCall) throws(DBusError) {
        guard options.access.isEnabled, let entry = existingEntry(keyText) else { return }
        try authorizeRead(entry.definition, by: call)
    }

    func authorizeRead(_ definition: PropertyDefinition, by call: MethodCall) throws(DBusError) {
        try bridged { () throws(PropBusError) in
            try options.access.checkRead(definition.key.text, writers: definition.writers, secret: definition.secret,
                                         caller: call.credentials)
        }
    }

    /// Whether the caller of `call` may see `definition`'s value (listings leave it out if not).
    func mayRead(_ definition: PropertyDefinition, by call: MethodCall) -> Bool {
        options.access.mayRead(writers: definition.writers, secret: definition.secret, caller: call.credentials)
    }

    /// Whether broadcasts may carry the value of `definition`: not if only some may read it.
    func isRestricted(_ definition: PropertyDefinition) -> Bool {
        options.access.isEnabled && definition.secret
    }

    /// `Bind`: the caller must be a writer of every key the binding writes and a reader of every
    /// key it reads, the keys named in its transforms included. Options the model will refuse
    /// count as both directions here (the strictest); the model reports them.
    func authorizeBind(key: String, to: String, options bindOptions: [String: DBusValue], by call: MethodCall) throws(DBusError) {
        guard options.access.isEnabled else { return }
        let parsed = (try? BindOptions(options: bindOptions)) ?? BindOptions()
        var writes: [String] = [], reads: [String] = []
        if parsed.direction != .to { writes.append(key); reads.append(to) }
        if parsed.direction != .from { writes.append(to); reads.append(key) }
        for expression in [parsed.toKey, parsed.toTarget].compactMap({ $0 }) {
            reads += expression.referencedKeys.sorted()
        }
        for name in writes { try authorizeWrite(existing: name, by: call) }
        for name in reads { try authorizeRead(existing: name, by: call) }
    }

    /// `Unbind`: the connection that made the binding, or anyone who may write the keys it
    /// writes (who could have made it).
    func authorizeUnbind(_ binding: Binding, by call: MethodCall) throws(DBusError) {
        guard options.access.isEnabled else { return }
        if let owner = binding.owner, owner == call.sender { return }
        if binding.flowsToKey { try authorizeWrite(existing: binding.key.text, by: call) }
        if binding.flowsToTarget { try authorizeWrite(existing: binding.to.text, by: call) }
    }

    private func existingEntry(_ keyText: String) -> PropertyModel.Entry? {
        (try? Key(keyText)).flatMap { model.entry(for: $0) }
    }
}

extension NameKind {
    /// A command's key: write rights on it are checked against the command's own `writers`
    /// option, and an unknown command passes (its handler reports it as it would to anyone).
    static let command = NameKind("command")
}
