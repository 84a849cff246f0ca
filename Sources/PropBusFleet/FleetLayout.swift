import DBus
import Etcd
import PropBus
import PropBusSystem

/// How fleet keys are laid out in etcd, and how one call's writes become one transaction.
/// Pure: no I/O, so it is tested alone.
///
/// - `PREFIX/keys/KEY`: the value, `ValueCodec` bytes (its D-Bus signature, then the value),
///   or the same with who wrote it (``encodeValue(_:attribution:time:)``, ``FleetAttribution``).
/// - `PREFIX/defs/KEY`: the definition, `ValueCodec` bytes of an `a{sv}`: `type` (s),
///   `default` (v), `options` (the `CreateProperty` options, `a{sv}`) and `by` (who wrote it).
/// - `PREFIX/hosts/NAME`: presence, under a lease.
/// - `PREFIX/deleted-by`: who made the deletions of the last transaction that deleted
///   something (``deleterKey``).
public struct FleetLayout: Sendable, Equatable {
    /// The prefix, `/PREFIX/`.
    public let prefix: [UInt8]

    public init(prefix: String) { self.prefix = Array(prefix.utf8) }

    /// What one etcd key of the prefix is.
    public enum Path: Equatable, Sendable {
        case value(Key)
        case definition(Key)
        case host(String)
        /// Something else under the prefix (ignored).
        case other
    }

    public func valueKey(_ key: Key) -> [UInt8] { prefix + Array("keys/".utf8) + Array(key.text.utf8) }
    public func definitionKey(_ key: Key) -> [UInt8] { prefix + Array("defs/".utf8) + Array(key.text.utf8) }
    public func hostKey(_ name: String) -> [UInt8] { prefix + Array("hosts/".utf8) + Array(name.utf8) }
    public var hostsPrefix: [UInt8] { prefix + Array("hosts/".utf8) }

    /// Who made the deletions of the transaction that last put it (``encodeDeleter(_:time:)``):
    /// a deletion in etcd carries no value, so a transaction that deletes a fleet key or a fleet
    /// layer puts this beside, and every host names the deleter of each deletion of that
    /// revision in its history. One key for the whole fleet: it is overwritten, never piles up.
    public var deleterKey: [UInt8] { prefix + Array("deleted-by".utf8) }

    /// What `etcdKey` is; `.other` for keys outside the layout or with an invalid key name.
    public func classify(_ etcdKey: [UInt8]) -> Path {
        guard etcdKey.starts(with: prefix) else { return .other }
        let rest = String(decoding: etcdKey[prefix.count...], as: UTF8.self)
        for (folder, make) in [("keys/", Path.value), ("defs/", Path.definition)] where rest.hasPrefix(folder) {
            guard let key = try? Key(String(rest.dropFirst(folder.count))) else { return .other }
            return make(key)
        }
        if rest.hasPrefix("hosts/") { return .host(String(rest.dropFirst("hosts/".count))) }
        return .other
    }

    // MARK: Values and definitions

    public static func encodeValue(_ value: DBusValue) -> [UInt8] { ValueCodec.encode(value) }

    public static func decodeValue(_ bytes: [UInt8]) throws(PropBusError) -> DBusValue {
        try decodeAttributedValue(bytes).value
    }

    /// The first byte of a value that carries its attribution (a bare value starts with
    /// ValueCodec's format byte, 1).
    static let attributedFormat: UInt8 = 0xA7

    /// `value` with who wrote it, as a fleet key's value in etcd holds it: the attributed format
    /// byte, the value's ValueCodec length (4 bytes, little-endian), the value's ValueCodec bytes,
    /// then the writer's ``FleetAttribution`` record (`host`, `uid`, `user`, `pid`, `comm`,
    /// `exe`, `unit`, `bus_name`, `via` and `time`). Each host's history then names the host and
    /// user of every change. A host that knows only the earlier `a{sv}` after the value reads
    /// the value and leaves the record (it reads the value unattributed).
    public static func encodeValue(_ value: DBusValue, attribution: WriteSet.Caller?, time: Int64) -> [UInt8] {
        guard let attribution else { return encodeValue(value) }
        let encoded = ValueCodec.encode(value)
        var output: [UInt8] = []
        output.reserveCapacity(5 + encoded.count + 96)
        output.append(attributedFormat)
        withUnsafeBytes(of: UInt32(encoded.count).littleEndian) { output.append(contentsOf: $0) }
        output += encoded
        FleetAttribution.encode(attribution, time: time, into: &output)
        return output
    }

    /// Who wrote something, as an earlier propbusd put it in etcd: an `a{sv}` of the caller's
    /// fields (`host`, `uid`, `user`, `pid`, `comm`, `exe`, `unit`, `bus_name`) with `via` and
    /// `time`; `nil` if it is no `a{sv}`. Still read: a fleet may hold such values for ever.
    static func caller(ofAttribution value: DBusValue) -> WriteSet.Caller? {
        guard let fields = value.stringKeyedEntries?.mapValues(\.unwrappingVariant) else { return nil }
        return WriteSet.Caller(via: fields["via"]?.stringValue ?? "", fields: fields)
    }

    /// Who a record of either format names: a ``FleetAttribution`` record, or an earlier host's
    /// `a{sv}` in ValueCodec bytes; `nil` for anything else.
    static func caller(ofRecord bytes: ArraySlice<UInt8>) -> WriteSet.Caller? {
        if bytes.first == FleetAttribution.marker { return FleetAttribution.decode(bytes)?.caller }
        return (try? ValueCodec.decode(Array(bytes))).flatMap(caller(ofAttribution:))
    }

    /// The `by` field of a definition or a fleet layer: the writer's ``FleetAttribution``
    /// record as `ay` (a host that expects the earlier `a{sv}` there passes over it).
    static func byField(_ caller: WriteSet.Caller, time: Int64) -> DBusValue {
        .bytes(FleetAttribution.encode(caller, time: time))
    }

    /// Who a `by` field names, in either format (``byField(_:time:)``, or an earlier `a{sv}`).
    static func caller(ofBy value: DBusValue) -> WriteSet.Caller? {
        if case .bytes(let record) = value { return FleetAttribution.decode(record[...])?.caller }
        return caller(ofAttribution: value)
    }

    /// The ``deleterKey`` record: who made a transaction's deletions, a ``FleetAttribution``
    /// record (a host that reads only the earlier `a{sv}` names no deleter).
    public static func encodeDeleter(_ caller: WriteSet.Caller, time: Int64) -> [UInt8] {
        FleetAttribution.encode(caller, time: time)
    }

    /// Who made the deletions of each revision among `events`, from the ``deleterKey`` records
    /// they hold (put in the same transaction as the deletions, so in the same watch update).
    public func deleters(in events: [WatchEvent]) -> [Int64: WriteSet.Caller] {
        var deleters: [Int64: WriteSet.Caller] = [:]
        for event in events where event.kind == .put && event.kv.key == deleterKey {
            if let caller = Self.caller(ofRecord: event.kv.value[...]) { deleters[event.kv.modRevision] = caller }
        }
        return deleters
    }

    /// A fleet key's value from etcd and, when it carries one, who wrote it; a value written
    /// without attribution (by an earlier propbusd, or etcdctl) reads as the value alone.
    public static func decodeAttributedValue(_ bytes: [UInt8]) throws(PropBusError) -> (value: DBusValue, caller: WriteSet.Caller?) {
        var unused = FleetAttribution.LastRead()
        return try decodeAttributedValue(bytes, reusing: &unused)
    }

    /// ``decodeAttributedValue(_:)``, a record that repeats `last`'s caller read as that caller
    /// (``FleetAttribution/decode(_:reusing:)``).
    static func decodeAttributedValue(_ bytes: [UInt8], reusing last: inout FleetAttribution.LastRead) throws(PropBusError) -> (value: DBusValue, caller: WriteSet.Caller?) {
        do {
            guard bytes.first == attributedFormat else { return (try ValueCodec.decode(bytes), nil) }
            guard bytes.count >= 5 else { throw ValueCodecError("an attributed value of \(bytes.count) bytes") }
            let length = Int(bytes[1]) | Int(bytes[2]) << 8 | Int(bytes[3]) << 16 | Int(bytes[4]) << 24
            guard length <= bytes.count - 5 else { throw ValueCodecError("an attributed value's length \(length) passes its end") }
            let value = try ValueCodec.decode(Array(bytes[5..<5 + length]))
            // The value is what matters: an attribution that cannot be read leaves it unattributed.
            let record = bytes[(5 + length)...]
            guard record.first == FleetAttribution.marker else { return (value, caller(ofRecord: record)) }
            return (value, FleetAttribution.decode(record, reusing: &last)?.caller)
        } catch {
            throw PropBusError(.invalidValue, "an etcd value could not be read: \(error)")
        }
    }

    /// A definition as etcd holds it. Host-local parts stay out: the model file it came from.
    /// With `attribution`, also `by`: who defined it (``byField(_:time:)``), for the other hosts'
    /// history; a host that does not know `by` passes over it.
    public static func encodeDefinition(_ definition: PropertyDefinition, attribution: WriteSet.Caller? = nil, time: Int64 = 0) -> [UInt8] {
        var options = definition.metadata
        for local in ["default", "source", "state_of"] { options[local] = nil }
        var fields: [String: DBusValue] = [
            "type": .string(definition.type.signature),
            "default": definition.defaultValue,
            "options": .vardict(options),
        ]
        if let attribution { fields["by"] = byField(attribution, time: time) }
        return ValueCodec.encode(.vardict(fields))
    }

    /// Who wrote a definition from etcd; `nil` for one written without (by an earlier propbusd).
    public static func definitionCaller(_ bytes: [UInt8]) -> WriteSet.Caller? {
        guard let by = (try? decodeValue(bytes))?.stringKeyedEntries?["by"] else { return nil }
        return caller(ofBy: by.unwrappingVariantOnce)
    }

    /// Whether two definitions from etcd (or ``encodeDefinition(_:attribution:time:)``) define
    /// the same, whoever wrote them.
    public static func sameDefinition(_ one: [UInt8], _ other: [UInt8]) -> Bool {
        func unattributed(_ bytes: [UInt8]) -> DBusValue? {
            guard var fields = (try? decodeValue(bytes))?.stringKeyedEntries else { return nil }
            fields["by"] = nil
            return .vardict(fields)
        }
        return one == other || (unattributed(one).map { $0 == unattributed(other) } ?? false)
    }

    /// The `CreateProperty` arguments a definition from etcd stands for.
    public static func decodeDefinition(_ bytes: [UInt8], key: Key) throws(PropBusError) -> (type: String, defaultValue: DBusValue, options: [String: DBusValue]) {
        let decoded = try decodeValue(bytes)
        guard let fields = decoded.stringKeyedEntries?.mapValues(\.unwrappingVariantOnce),
              let type = fields["type"]?.stringValue, let defaultValue = fields["default"],
              let options = fields["options"]?.stringKeyedEntries else {
            throw PropBusError(.invalidValue, "the fleet definition of \(key) is not a{sv} with type, default and options")
        }
        var withScope = options.mapValues(\.unwrappingVariantOnce)
        withScope["scope"] = .string(PropertyScope.fleet.rawValue)
        return (type, defaultValue, withScope)
    }

    // MARK: Transactions

    /// One call's writes as an etcd transaction.
    public struct Transaction: Sendable, Equatable {
        /// `mod_revision == known` of every fleet key written (value and definition) and read.
        public var compares: [Compare] = []
        /// The puts and deletes.
        public var success: [RequestOp] = []
        /// Reads of every compared key, to refresh the mirror when a compare fails.
        public var failure: [RequestOp] = []
        /// The fleet keys written, in order.
        public var written: [Key] = []
        /// Which of them had their value (`true`) and definition written, by key.
        public var writesValue: Set<Key> = []
        public var writesDefinition: Set<Key> = []
        /// About how many bytes of the request it takes (base64 and JSON included).
        public var requestBytes = 0

        public init() {}
    }

    /// etcd's default limits (`--max-txn-ops`, `--max-request-bytes`).
    public static let maximumOperations = 128
    public static let maximumRequestBytes = 1_572_864

    /// The transaction that makes etcd hold what a call did to fleet keys: `before` and `after`
    /// are each touched key's entry before and after the call (`nil`: absent), `read` the keys
    /// its bindings read, `known` the etcd revisions the mirror holds.
    ///
    /// Throws `LimitsExceeded` above etcd's limits and `InvalidArgs` for a fleet key made local.
    /// Without `comparingWrittenValues`, the values the call writes are not compared (their
    /// definitions and the keys read still are): a plain write that lost several times in a
    /// row to a host writing flat out then lands, last in etcd's order.
    public func transaction(before: [Key: PropertyModel.Entry?], after: [Key: PropertyModel.Entry?], read: Set<Key>,
                            comparingWrittenValues: Bool = true, attribution: WriteSet.Caller? = nil, time: Int64 = 0,
                            isFleet: (Key) -> Bool, known: (Key) -> FleetRevisions) throws(PropBusError) -> Transaction {
        var plan = Transaction()
        var compared: Set<[UInt8]> = []
        func compare(_ etcdKey: [UInt8], _ revision: Int64) {
            guard compared.insert(etcdKey).inserted else { return }
            plan.compares.append(.modRevision(of: etcdKey, is: max(revision, 0)))
            plan.failure.append(.get(etcdKey))
        }
        var requestBytes = 64
        for key in before.keys.sorted() {
            let old = before[key] ?? nil, new = after[key] ?? nil
            let wasFleet = old?.definition.scope == .fleet, isFleetNow = new?.definition.scope == .fleet
            guard wasFleet || isFleetNow else { continue }
            if wasFleet, let new, !isFleetNow {
                throw PropBusError(.invalidArgs, "\(new.definition.key) is a fleet key; it cannot become local (delete it from the fleet, then create it again with scope local)")
            }
            let revisions = known(key)
            compare(definitionKey(key), revisions.definition)
            if comparingWrittenValues || new == nil { compare(valueKey(key), revisions.value) }
            requestBytes += 2 * (prefix.count + key.text.utf8.count + 16) * 4 / 3
            guard let new else {
                plan.success += [.delete(definitionKey(key)), .delete(valueKey(key))]
                plan.written.append(key)
                plan.writesValue.insert(key)
                plan.writesDefinition.insert(key)
                continue
            }
            // A definition etcd does not hold (never offered, its offer failed, or the fleet
            // deleted it and a model file here declares it again) goes with the write: a value
            // alone reaches no other host. Equal definitions encode alike: a plain Set is spared
            // encoding both.
            let unshared = !wasFleet || revisions.definition <= 0
            if unshared || old?.definition != new.definition,
               case let definitionBytes = Self.encodeDefinition(new.definition),
               unshared || old.map({ Self.encodeDefinition($0.definition) }) != definitionBytes {
                let attributed = Self.encodeDefinition(new.definition, attribution: attribution, time: time)
                plan.success.append(.put(definitionKey(key), attributed))
                plan.writesDefinition.insert(key)
                requestBytes += (attributed.count + prefix.count + key.text.utf8.count + 40) * 4 / 3
            }
            if old?.storedValue != new.storedValue || (!wasFleet && new.storedValue != nil) {
                if let stored = new.storedValue {
                    let bytes = Self.encodeValue(stored, attribution: attribution, time: time)
                    plan.success.append(.put(valueKey(key), bytes))
                    requestBytes += (bytes.count + prefix.count + key.text.utf8.count + 40) * 4 / 3
                } else {
                    plan.success.append(.delete(valueKey(key)))
                }
                plan.writesValue.insert(key)
            }
            if plan.writesValue.contains(key) || plan.writesDefinition.contains(key) { plan.written.append(key) }
        }
        for key in read.sorted() where before[key] == nil && isFleet(key) {
            compare(valueKey(key), known(key).value)
        }
        // A deletion (of a key, or a reset's of its value) carries no writer: the record beside does.
        if let attribution, plan.success.contains(where: { if case .deleteRange = $0 { true } else { false } }) {
            let record = Self.encodeDeleter(attribution, time: time)
            plan.success.append(.put(deleterKey, record))
            requestBytes += (record.count + deleterKey.count + 40) * 4 / 3
        }
        let most = max(plan.compares.count, plan.success.count)
        guard most <= Self.maximumOperations else {
            throw PropBusError(.limitsExceeded, "the call writes \(plan.written.count) fleet keys (\(most) etcd operations); etcd takes at most \(Self.maximumOperations) in one transaction: write fewer keys at once")
        }
        guard requestBytes <= Self.maximumRequestBytes else {
            throw PropBusError(.limitsExceeded, "the call's fleet writes need about \(requestBytes) bytes in one etcd request; etcd takes at most \(Self.maximumRequestBytes) (1.5 MiB): write less at once")
        }
        plan.requestBytes = requestBytes
        return plan
    }
}
