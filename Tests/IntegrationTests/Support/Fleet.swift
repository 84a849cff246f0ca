import DBus
import Etcd
import Foundation
import PropBus

/// What the fleet tests share: names, the fleet barrier, reading etcd.
enum Fleet {
    /// The fleet-scoped key every fleet test creates for ``barrier(from:to:)``.
    static let markerKey = "fleet.marker.tick"

    /// A prefix of its own for one test: tests sharing an etcd never see each other's keys.
    static func uniquePrefix(_ test: String) -> String {
        let name = test.filter { $0.isLetter || $0.isNumber }.suffix(40)
        return "pbtest-\(name)-\(UUID().uuidString.prefix(8).lowercased())"
    }

    /// An integer metadata or property value, whatever integer type (or decimal text) carries it.
    static func integer(_ value: DBusValue) -> Int64? {
        switch value.unwrappingVariant {
        case .int64(let v): return v
        case .uint64(let v): return Int64(exactly: v)
        case .int32(let v): return Int64(v)
        case .uint32(let v): return Int64(v)
        case .string(let text): return Int64(text)
        default: return nil
        }
    }

    /// "Every fleet change made before this reached `to`" without a sleep: `from` writes a new
    /// value to the fleet marker key and this waits for `to`'s PropertiesChanged carrying it.
    ///
    /// etcd orders all writes; a daemon applies watch events in revision order and signals each
    /// round before the next. So once the marker (a later revision) is signalled on `to`, every
    /// earlier fleet change has been applied and signalled there too, and a change that `to`
    /// has not signalled by then was never coming.
    static func barrier(from: FleetHost, to: FleetHost, file: StaticString = #filePath, line: UInt = #line) async throws {
        let (path, name) = PropBusAPI.locate(markerKey)
        // A fresh random value rather than the next one: `from`'s mirror may not have seen the
        // other host's last marker, and a write of the value etcd already holds sends nothing.
        let next = Int32.random(in: 1...Int32.max)
        let recorder = try await to.client.record(path: path, interface: PropBusAPI.properties, member: "PropertiesChanged")
        try await from.client.set(markerKey, .int32(next))
        let arrived = await recorder.wait(timeout: 15) { $0.contains { $0.changed[name] == .int32(next) } }
        guard arrived.contains(where: { $0.changed[name] == .int32(next) }) else {
            throw BarrierError(message: "the fleet marker \(markerKey) = \(next) set on \(from.name) never reached \(to.name); \(to.name)'s stderr:\n\(to.stderr.suffix(2000))")
        }
    }

    /// The etcd entry holding `key`'s value under `prefix` (`/PREFIX/keys/<key>`), read
    /// linearizably; nil when there is none.
    static func etcdEntry(_ etcd: EtcdClient, prefix: String, key: String) throws -> KeyValue? {
        try allEntries(etcd, prefix: prefix).first { entry in
            let name = String(decoding: entry.key, as: UTF8.self)
            return name == "/\(prefix)/keys/\(key)"
        }
    }

    /// Every etcd entry under `/prefix/`, where propbusd keeps a fleet's keys.
    static func allEntries(_ etcd: EtcdClient, prefix: String) throws -> [KeyValue] {
        try etcd.range(key: Array("/\(prefix)/".utf8), prefix: true).kvs
    }

    /// The names of the entries under `prefix`, for failure messages.
    static func dump(_ etcd: EtcdClient, prefix: String) -> String {
        guard let entries = try? allEntries(etcd, prefix: prefix) else { return "(etcd unreadable)" }
        return entries.map { "\(String(decoding: $0.key, as: UTF8.self)) @\($0.modRevision)" }.joined(separator: "\n")
    }
}
