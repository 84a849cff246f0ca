import DBusValues
import PropBus

/// Who wrote something in etcd, as the compact record every fleet value, the deleter record
/// and the `by` of definitions and layers carry: etcd stores it, answers it and sends
/// it to every host's watch with each value, so its size is paid on every Set's path. The same
/// fields as the `a{sv}` earlier hosts wrote (`host`, `uid`, `user`, `pid`, `comm`, `exe`,
/// `unit`, `bus_name`, `via`, `time`), without the field names and type signatures: about a
/// third of the bytes. Written and read by hand: no `DBusValue`s, no dictionaries.
///
/// Layout, in this order:
///
/// | field | encoding |
/// | --- | --- |
/// | marker | `0xCA` (ValueCodec's format byte is 1: a host that reads only the `a{sv}` refuses the record, so it reads the value unattributed) |
/// | version | `1` (a later layout takes another; this reader leaves it unread, unattributed) |
/// | via | one byte: 1…N a method of ``knownMethods`` (`Set` = 1), or 0 then a string |
/// | bus_name | a string |
/// | uid, pid | an optional number |
/// | user, exe | an optional string |
/// | comm | 0 absent, 1 the last path component of `exe` (the usual case), n + 2 then n bytes |
/// | unit, host | an optional string |
/// | time | a number: nanoseconds since the epoch (the `Int64`'s bit pattern) |
///
/// A number is a LEB128 varint (7 bits a byte, least significant first); an optional one is
/// its value + 1, 0 when absent. A string is its UTF-8 length as a number, then the bytes; an
/// optional one has length + 1, 0 when absent. Nothing may follow the last field.
enum FleetAttribution {
    static let marker: UInt8 = 0xCA
    static let version: UInt8 = 1

    /// The methods `via` names in one byte, by their position + 1. Append only: a host reads
    /// the codes it knows, and a code it does not know leaves the record unattributed.
    static let knownMethods = [
        "Set", "Apply", "CompareAndSet", "Reset", "CreateProperty", "DeleteProperty", "Revert", "RevertRange",
        "Bind", "Unbind", "Override", "ReleaseOverride", "SetFleetLayer", "RemoveFleetLayer", "Execute", "Reload",
    ]

    /// `caller`'s record at `time` (nanoseconds since the epoch), appended to `output`.
    static func encode(_ caller: WriteSet.Caller, time: Int64, into output: inout [UInt8]) {
        output.append(marker)
        output.append(version)
        if let code = knownMethods.firstIndex(of: caller.via) {
            output.append(UInt8(code + 1))
        } else {
            output.append(0)
            writeString(caller.via, to: &output)
        }
        writeString(caller.busName, to: &output)
        writeOptional(caller.userID.map(UInt64.init), to: &output)
        writeOptionalString(caller.userName, to: &output)
        writeOptional(caller.processID.map(UInt64.init), to: &output)
        writeOptionalString(caller.executable, to: &output)
        if let command = caller.command {
            if let executable = caller.executable, lastComponent(of: executable).elementsEqual(command.utf8) {
                output.append(1)
            } else {
                Varint.append(UInt64(command.utf8.count) + 2, to: &output)
                output.append(contentsOf: command.utf8)
            }
        } else {
            output.append(0)
        }
        writeOptionalString(caller.unit, to: &output)
        writeOptionalString(caller.host, to: &output)
        Varint.append(UInt64(bitPattern: time), to: &output)
    }

    /// `caller`'s record at `time`.
    static func encode(_ caller: WriteSet.Caller, time: Int64) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(96)
        encode(caller, time: time, into: &output)
        return output
    }

    /// The last record a host read and whom it named. One writer's records differ only in
    /// their time, the last field, and a host's watch reads the same few writers again and
    /// again: a record that begins with the same bytes up to its time names the same caller,
    /// and only its time is read. Owned by whoever reads (a host's ``Fleet``, on its queue).
    struct LastRead {
        /// The last record's bytes before its time.
        var fields: [UInt8] = []
        var caller: WriteSet.Caller?
    }

    /// ``decode(_:)``, reading only the time of a record that repeats `last`'s fields.
    static func decode(_ bytes: ArraySlice<UInt8>, reusing last: inout LastRead) -> (caller: WriteSet.Caller, time: Int64)? {
        if let caller = last.caller, bytes.count > last.fields.count, bytes.starts(with: last.fields) {
            var reader = Reader(bytes: bytes)
            reader.offset += last.fields.count
            guard let time = reader.number(below: nil), reader.isAtEnd else { return nil }
            return (caller, Int64(bitPattern: time))
        }
        guard let (caller, time, timeOffset) = decodeAll(bytes) else { return nil }
        last = LastRead(fields: Array(bytes[..<timeOffset]), caller: caller)
        return (caller, time)
    }

    /// The caller and time a record holds; `nil` for anything else: another marker or version,
    /// a field cut short or past the end, a number too large for its field, text that is not
    /// UTF-8, an unknown method code, bytes after the last field.
    static func decode(_ bytes: ArraySlice<UInt8>) -> (caller: WriteSet.Caller, time: Int64)? {
        decodeAll(bytes).map { ($0.caller, $0.time) }
    }

    /// ``decode(_:)``, with where the time begins.
    private static func decodeAll(_ bytes: ArraySlice<UInt8>) -> (caller: WriteSet.Caller, time: Int64, timeOffset: Int)? {
        var reader = Reader(bytes: bytes)
        guard reader.byte() == marker, reader.byte() == version, let code = reader.byte() else { return nil }
        let via: String
        if code == 0 {
            guard let text = reader.string() else { return nil }
            via = text
        } else {
            guard Int(code) <= knownMethods.count else { return nil }
            via = knownMethods[Int(code) - 1]
        }
        guard let busName = reader.string(),
              let userID = reader.optionalNumber(below: 1 << 32), let userName = reader.optionalString(),
              let processID = reader.optionalNumber(below: 1 << 32), let executable = reader.optionalString(),
              let commandCode = reader.number(below: UInt64(Int32.max)) else { return nil }
        var command: String?
        switch commandCode {
        case 0: command = nil
        case 1:
            guard let executable else { return nil }
            command = String(decoding: lastComponent(of: executable), as: UTF8.self)
        default:
            guard let text = reader.text(count: Int(commandCode) - 2) else { return nil }
            command = text
        }
        guard let unit = reader.optionalString(), let host = reader.optionalString() else { return nil }
        let timeOffset = reader.offset
        guard let time = reader.number(below: nil), reader.isAtEnd else { return nil }
        let caller = WriteSet.Caller(via: via, busName: busName, userID: userID.map { UInt32($0) }, userName: userName,
                                     processID: processID.map { UInt32($0) }, command: command, executable: executable,
                                     unit: unit, host: host)
        return (caller, Int64(bitPattern: time), timeOffset)
    }

    /// What follows the last `/` of `path` (all of it without one).
    private static func lastComponent(of path: String) -> Substring.UTF8View {
        let utf8 = path.utf8
        guard let slash = utf8.lastIndex(of: UInt8(ascii: "/")) else { return path[...].utf8 }
        return path[utf8.index(after: slash)...].utf8
    }

    private static func writeOptional(_ value: UInt64?, to output: inout [UInt8]) {
        Varint.append(value.map { $0 + 1 } ?? 0, to: &output)
    }

    private static func writeString(_ text: String, to output: inout [UInt8]) {
        Varint.append(UInt64(text.utf8.count), to: &output)
        output.append(contentsOf: text.utf8)
    }

    private static func writeOptionalString(_ text: String?, to output: inout [UInt8]) {
        guard let text else { return output.append(0) }
        Varint.append(UInt64(text.utf8.count) + 1, to: &output)
        output.append(contentsOf: text.utf8)
    }

    /// Reads a record front to back; every read is `nil` once the bytes do not fit.
    private struct Reader {
        let bytes: ArraySlice<UInt8>
        var offset: Int

        init(bytes: ArraySlice<UInt8>) {
            self.bytes = bytes
            offset = bytes.startIndex
        }

        var isAtEnd: Bool { offset == bytes.endIndex }

        mutating func byte() -> UInt8? {
            guard offset < bytes.endIndex else { return nil }
            defer { offset += 1 }
            return bytes[offset]
        }

        /// A varint below `limit` (any 64-bit value without one).
        mutating func number(below limit: UInt64?) -> UInt64? {
            guard let value = Varint.read(bytes, at: &offset) else { return nil }
            if let limit, value >= limit { return nil }
            return value
        }

        /// An optional number: `.some(nil)` when absent, `nil` when it cannot be read.
        mutating func optionalNumber(below limit: UInt64) -> UInt64?? {
            guard let stored = number(below: limit + 1) else { return nil }
            return .some(stored == 0 ? nil : stored - 1)
        }

        mutating func text(count: Int) -> String? {
            guard count >= 0, bytes.endIndex - offset >= count else { return nil }
            defer { offset += count }
            let text = bytes[offset..<offset + count]
            // Nearly every field is ASCII, which String(decoding:) takes faster than the
            // validating initializer (a 41-byte path: 129 against 233 ns) and cannot repair.
            if text.allSatisfy({ $0 < 0x80 }) { return String(decoding: text, as: UTF8.self) }
            return String(validating: text, as: UTF8.self)
        }

        mutating func string() -> String? {
            guard let count = number(below: UInt64(Int32.max)) else { return nil }
            return text(count: Int(count))
        }

        /// An optional string: `.some(nil)` when absent, `nil` when it cannot be read.
        mutating func optionalString() -> String?? {
            guard let stored = number(below: UInt64(Int32.max)) else { return nil }
            guard stored > 0 else { return .some(nil) }
            guard let text = text(count: Int(stored) - 1) else { return nil }
            return .some(text)
        }
    }
}
