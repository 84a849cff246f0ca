import CSQLite
import DBusValues
import Glibc
import PropBus

/// The rows of leases, definitions and bindings: how each is written and read back.
extension SQLiteStore {
    // MARK: Leases

    func loadLeases(into state: inout StoredState) throws {
        let next = try database.prepare("SELECT value FROM meta WHERE name = 'next_lease'")
        while try next.step() { state.nextLeaseHandle = UInt64(bitPattern: next.integer(0)) }
        let rows = try database.prepare("SELECT handle, key, value, holder, uid, pid, comm, since, expires FROM leases ORDER BY handle")
        while try rows.step() {
            let handle = UInt64(bitPattern: rows.integer(0))
            do {
                let holder = LeaseHolder(busName: rows.text(3) ?? "",
                                         userID: rows.isNull(4) ? nil : UInt32(truncatingIfNeeded: rows.integer(4)),
                                         processID: rows.isNull(5) ? nil : UInt32(truncatingIfNeeded: rows.integer(5)),
                                         command: rows.text(6))
                state.leases.append(Lease(handle: handle, key: try Key(rows.text(1) ?? ""),
                                          subject: rows.isNull(2) ? .key : .override(try ValueCodec.decode(rows.blob(2))),
                                          holder: holder, since: UInt64(bitPattern: rows.integer(7)),
                                          expires: rows.isNull(8) ? nil : UInt64(bitPattern: rows.integer(8))))
            } catch {
                throw PropBusError(.storeFailed, "the store \(path) holds an unreadable lease \(handle): \(error)")
            }
        }
    }

    func writeLeases(_ changes: StoreChanges) throws {
        if let next = changes.nextLeaseHandle { try statements.saveNextLeaseHandle.run([.integer(Int64(bitPattern: next))]) }
        for (handle, write) in changes.leases.sorted(by: { $0.key < $1.key }) {
            switch write {
            case .save(let lease):
                var value: SQLiteValue = .null
                if case .override(let overriding) = lease.subject { value = .blob(ValueCodec.encode(overriding)) }
                try statements.saveLease.run([
                    .integer(Int64(bitPattern: handle)), .text(lease.key.text), value, .text(lease.holder.busName),
                    lease.holder.userID.map { .integer(Int64($0)) } ?? .null, lease.holder.processID.map { .integer(Int64($0)) } ?? .null,
                    lease.holder.command.map { .text($0) } ?? .null, .integer(Int64(bitPattern: lease.since)),
                    lease.expires.map { .integer(Int64(bitPattern: $0)) } ?? .null,
                ])
            case .delete:
                try statements.removeLease.run([.integer(Int64(bitPattern: handle))])
            }
        }
    }

    // MARK: Definitions

    /// What a stored definition holds besides its key, as stored.
    struct DefinitionTemplate: Hashable {
        var type: String
        var defaultValue: [UInt8]
        var options: [UInt8]

        // The blobs' bytes in one go: an array's own hash combines them one by one.
        func hash(into hasher: inout Hasher) {
            hasher.combine(type)
            hasher.combine(defaultValue.count)
            defaultValue.withUnsafeBytes { hasher.combine(bytes: $0) }
            options.withUnsafeBytes { hasher.combine(bytes: $0) }
        }
    }

    /// The `CreateProperty` options that rebuild `definition`'s metadata, as an `a{sv}`.
    ///
    /// Options at their default are left out: most definitions then store an empty `a{sv}`,
    /// which keeps startup with many properties fast.
    static func options(of definition: PropertyDefinition) -> DBusValue {
        var options = definition.metadata
        options["default"] = nil
        let defaults = PropertyDefinition(key: definition.key, type: definition.type, defaultValue: definition.defaultValue).metadata
        for (name, value) in options where defaults[name] == value { options[name] = nil }
        // Not metadata (no caller may set it), but it must survive restarts: quotas count it.
        if let creator = definition.creator { options[creatorOption] = .uint32(creator) }
        return .vardict(options)
    }

    /// The stored option that holds ``PropertyDefinition/creator``.
    static let creatorOption = "creator"

    static func definition(key keyText: String, type typeText: String, defaultValue: [UInt8], options: [UInt8]) throws -> PropertyDefinition {
        let key = try Key(keyText)
        let type = try DBusType(parsing: typeText)
        let value = try ValueCodec.decode(defaultValue)
        guard value.type == type else { throw ValueCodecError("default has type '\(value.signature)', not '\(typeText)'") }
        var definition = PropertyDefinition(key: key, type: type, defaultValue: value)
        guard var entries = try ValueCodec.decode(options).stringKeyedEntries else { throw ValueCodecError("options are not an a{sv}") }
        let creator = entries.removeValue(forKey: creatorOption)
        _ = try definition.apply(options: entries)
        if case .uint32(let uid)? = creator?.unwrappingVariant { definition.creator = uid }
        return definition
    }

    // MARK: Bindings

    /// The `Bind` options that rebuild `binding`, as an `a{sv}`.
    static func options(of binding: Binding) -> DBusValue {
        var options = binding.options
        options["owner"] = nil
        return .vardict(options)
    }

    static func binding(id: UInt64, key: String, to: String, options: [UInt8]) throws -> Binding {
        guard var entries = try ValueCodec.decode(options).stringKeyedEntries?.mapValues(\.unwrappingVariant) else {
            throw ValueCodecError("options are not an a{sv}")
        }
        // Read as Bind reads them: a stored binding is what a Bind made, with its principal.
        var principal: UInt32?
        if case .uint32(let uid) = entries.removeValue(forKey: "principal") { principal = uid }
        var bindOptions = try BindOptions(options: entries, binding: "the stored binding \(key) ↔ \(to)")
        bindOptions.persistent = true
        return Binding(id: id, key: try Key(key), to: try Key(to), options: bindOptions, principal: principal)
    }
}
