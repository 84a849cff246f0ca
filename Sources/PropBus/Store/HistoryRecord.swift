import DBusValues

/// One key's change, as history shows it.
public struct HistoryRecord: Sendable {
    /// The change it belongs to (one Apply of several keys is one change): its highest revision.
    public var change: UInt64
    /// The key's revision after the change (for a deletion: the round's revision).
    public var revision: UInt64
    /// When it was committed, in nanoseconds since the epoch.
    public var time: Int64
    /// The key that changed.
    public var key: Key
    /// `created`, `changed`, `redefined` or `deleted`.
    public var kind: String
    /// The value before (`nil`: the key did not exist, or history keeps only ``oldDigest``).
    public var oldValue: DBusValue?
    /// The value after the change (`nil`: the key was deleted, or history keeps only ``newDigest``).
    public var newValue: DBusValue?
    /// What history keeps of a value too large to keep whole (``ValueDigest``), before and after.
    public var oldDigest: ValueDigest?
    public var newDigest: ValueDigest?
    /// The method or the daemon's own work that made it (`Set`, `Apply`, `reload`, …).
    public var via: String
    /// Who made it, for a change made by a call.
    public var caller: WriteSet.Caller?
    /// Whether the key was transient (this record lives in memory only).
    public var transient: Bool
    /// What the record says beyond its values: whether the key was secret, and whether it had
    /// a value of its own (the user layer) or read its default and the layers below.
    public var flags: Flags = []
    /// Whether the record belongs to a definition of its key that was deleted since (the name
    /// may have come back with another one): its rules went with it, and nothing of it is
    /// carried into the key's present definition.
    public var ofDeletedDefinition = false

    /// What a record says beyond its values.
    public struct Flags: OptionSet, Sendable, Hashable {
        public let rawValue: Int64
        public init(rawValue: Int64) { self.rawValue = rawValue }
        /// The key was secret before or after the change: its values are its writers' only.
        public static let secret = Flags(rawValue: 1)
        /// Before the change the key had no value of its own (it read its default, or a layer
        /// below the user's): undoing the change resets it rather than pinning what it read.
        public static let oldUnset = Flags(rawValue: 2)
        /// After the change the key had no value of its own (a Reset).
        public static let newUnset = Flags(rawValue: 4)
    }

    /// A record with every field given (a store reads them back from its rows).
    public init(change: UInt64, revision: UInt64, time: Int64, key: Key, kind: String, oldValue: DBusValue?,
                newValue: DBusValue?, via: String, caller: WriteSet.Caller?, transient: Bool) {
        self.change = change
        self.revision = revision
        self.time = time
        self.key = key
        self.kind = kind
        self.oldValue = oldValue
        self.newValue = newValue
        self.via = via
        self.caller = caller
        self.transient = transient
    }

    /// Whether the key existed before the change (its value kept whole or as a digest).
    public var hadOldValue: Bool { oldValue != nil || oldDigest != nil }
    /// Whether the key existed after the change.
    public var hasNewValue: Bool { newValue != nil || newDigest != nil }

    /// Whether `value` is what the change left (compared by digest when only that is kept).
    public func wrote(_ value: DBusValue) -> Bool {
        if let newValue { return newValue == value }
        return newDigest.map { $0 == ValueDigest(of: value) } ?? false
    }

    /// Bytes a record held in memory is charged (transient keys' history): its values
    /// marshalled, or their digests, plus an allowance for its fields.
    public var chargedBytes: Int {
        func size(_ value: DBusValue?, _ digest: ValueDigest?) -> Int {
            if let value { return value.wireSize() }
            return digest == nil ? 0 : ValueDigest.storedSize
        }
        return size(oldValue, oldDigest) + size(newValue, newDigest) + Self.fieldAllowance
    }

    /// What a row's fields (times, ids, kind, method, caller, index entries) are counted as,
    /// besides its values.
    public static let fieldAllowance = 64
}

/// What history keeps of a value larger than it keeps whole: its marshalled size and the
/// SHA-256 of its stored encoding (``ValueCodec``), enough to tell whether a key still holds it.
public struct ValueDigest: Sendable, Hashable {
    /// The value's size marshalled for D-Bus (``DBusValue/wireSize(at:)``).
    public var size: UInt64
    /// SHA-256 of ``ValueCodec/encode(_:)`` of the value: equal values, equal digests.
    public var sha256: [UInt8]

    public init(size: UInt64, sha256: [UInt8]) {
        self.size = size
        self.sha256 = sha256
    }

    /// The digest of `value`.
    public init(of value: DBusValue) {
        self.init(of: value, encoded: ValueCodec.encode(value))
    }

    /// The digest of `value`, whose stored encoding is `encoded`.
    public init(of value: DBusValue, encoded: [UInt8]) {
        size = UInt64(value.wireSize())
        sha256 = SHA256.digest(encoded)
    }

    /// The bytes a store keeps: the size (8 bytes, little-endian) and the 32 of the digest.
    public var stored: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Self.storedSize)
        for shift in stride(from: 0, to: 64, by: 8) { bytes.append(UInt8(truncatingIfNeeded: size >> UInt64(shift))) }
        return bytes + sha256
    }

    /// ``stored`` read back; `nil` for bytes that are not one.
    public init?(stored bytes: [UInt8]) {
        guard bytes.count == Self.storedSize else { return nil }
        var size: UInt64 = 0
        for index in 0..<8 { size |= UInt64(bytes[index]) << UInt64(index * 8) }
        self.init(size: size, sha256: Array(bytes[8...]))
    }

    /// The length of ``stored``.
    public static let storedSize = 40

    /// `sha256:` and the digest in hexadecimal.
    public var text: String { "sha256:" + SHA256.hex(sha256) }
}
