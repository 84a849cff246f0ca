import DBus
import Foundation
import XCTest

/// A fleet key's value in etcd carries who wrote it (host, uid, user, comm, via, time), so
/// every host's history of the key names the host and the user that made each change.
final class FleetHistoryTests: FleetTestCase {
    private func history(_ host: FleetHost, _ key: String) async throws -> [[String: Any]] {
        let result = try await host.propctl(["--json", "history", key])
        XCTAssertEqual(result.status, 0, "\(result)")
        return try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [[String: Any]], result.stdout)
    }

    func testBothHostsShowTheSameHistoryOfAFleetKeyNamingTheHostAndUser() async throws {
        try await hostA.createFleet("kiosk.volume", "i", default: .int32(50))
        let defined = await hostB.waitFor("kiosk.volume", .int32(50))
        XCTAssertTrue(defined, diagnostics)
        let setOnA = try await hostA.propctl(["set", "kiosk.volume", "40"])
        XCTAssertTrue(setOnA.succeeded, "\(setOnA)")
        let arrived = await hostB.waitFor("kiosk.volume", .int32(40))
        XCTAssertTrue(arrived, diagnostics)
        let setOnB = try await hostB.propctl(["set", "kiosk.volume", "30"])
        XCTAssertTrue(setOnB.succeeded, "\(setOnB)")
        let back = await hostA.waitFor("kiosk.volume", .int32(30))
        XCTAssertTrue(back, diagnostics)

        for host in [hostA!, hostB!] {
            let rows = try await history(host, "kiosk.volume").filter { $0["kind"] as? String == "changed" }
            XCTAssertEqual(rows.compactMap { $0["new"] as? Int }, [40, 30], "\(host.name): \(rows)")
            let fromA = try XCTUnwrap(rows.first), fromB = try XCTUnwrap(rows.last)
            XCTAssertEqual(fromA["host"] as? String, "fleet-host-a", "\(host.name): \(fromA)")
            XCTAssertEqual(fromB["host"] as? String, "fleet-host-b", "\(host.name): \(fromB)")
            for row in [fromA, fromB] {
                XCTAssertEqual(row["user"] as? String, "root", "\(host.name): \(row)")
                XCTAssertEqual(row["uid"] as? Int, Int(getuid()), "\(host.name): \(row)")
                XCTAssertEqual(row["comm"] as? String, "propctl", "\(host.name): \(row)")
            }
            let remote = host === hostA ? fromB : fromA
            XCTAssertEqual(remote["via"] as? String, "fleet change from \(host === hostA ? "fleet-host-b" : "fleet-host-a") (Set)", "\(host.name): \(remote)")
        }
    }

    /// Sets of independent keys that come together share an etcd txn (the host has one out at
    /// a time; the rest wait and go in one): each key keeps its own value and writer, on the
    /// other host too, where one etcd revision with several keys is one remote round that
    /// announces each key once and records a history row per key.
    func testIndependentSetsThatShareATxnEachKeepTheirValueSignalAndHistoryRow() async throws {
        let keys = (0..<6).map { "shop.k\($0)" } + (0..<6).map { "till.k\($0)" }
        for key in keys { try await hostA.createFleet(key, "i", default: .int32(0)) }
        for key in keys {
            let defined = await hostB.waitFor(key, .int32(0))
            XCTAssertTrue(defined, diagnostics)
        }
        var recorders: [String: SignalRecorder] = [:]
        for group in ["shop", "till"] {
            recorders[group] = try await hostB.client.record(path: PropBusAPI.locate("\(group).k0").path, interface: PropBusAPI.properties,
                                                              member: "PropertiesChanged")
        }
        var sets: [Message] = []
        for (index, key) in keys.enumerated() {
            let (path, name) = PropBusAPI.locate(key)
            let set = try Message.methodCall(destination: PropBusAPI.busName, path: path, interface: PropBusAPI.properties, member: "Set")
            try set.append([.string(PropBusAPI.values), .string(name), .variant(.int32(Int32(index + 1)))])
            sets.append(set)
        }
        let errors = await hostA.pipelined(sets)
        XCTAssertTrue(errors.allSatisfy { $0 == nil }, "\(errors)")
        for (index, key) in keys.enumerated() {
            let arrived = await hostB.waitFor(key, .int32(Int32(index + 1)))
            XCTAssertTrue(arrived, diagnostics)
        }
        try await Fleet.barrier(from: hostA, to: hostB)
        let revisions = try keys.map { key in try XCTUnwrap(Fleet.etcdEntry(etcd, prefix: prefix, key: key), key).modRevision }
        XCTAssertLessThan(Set(revisions).count, keys.count, "every Set had a txn of its own: \(revisions)")

        for key in keys {
            let (_, name) = PropBusAPI.locate(key)
            let group = String(key.prefix { $0 != "." })
            let announced = recorders[group]?.signals.filter { $0.changed[name] != nil } ?? []
            XCTAssertEqual(announced.count, 1, "\(key) on B: \(announced)")
            let rows = try await history(hostB, key).filter { $0["kind"] as? String == "changed" }
            XCTAssertEqual(rows.count, 1, "\(key): \(rows)")
            XCTAssertEqual(rows.first?["host"] as? String, "fleet-host-a", "\(key): \(rows)")
            XCTAssertEqual(rows.first?["via"] as? String, "fleet change from fleet-host-a (Set)", "\(key): \(rows)")
        }

        // Resets delete the values: each puts the record of who deleted, one etcd key for the
        // fleet, so each goes in a txn of its own (etcd refuses a txn putting a key twice).
        var resets: [Message] = []
        for key in keys {
            let (path, name) = PropBusAPI.locate(key)
            let reset = try Message.methodCall(destination: PropBusAPI.busName, path: path, interface: PropBusAPI.values, member: "Reset")
            try reset.append([.string(name)])
            resets.append(reset)
        }
        let resetErrors = await hostA.pipelined(resets)
        XCTAssertTrue(resetErrors.allSatisfy { $0 == nil }, "\(resetErrors)")
        try await Fleet.barrier(from: hostA, to: hostB)
        for key in keys {
            let rows = try await history(hostB, key).filter { $0["kind"] as? String == "changed" }
            XCTAssertEqual(rows.last?["via"] as? String, "fleet change from fleet-host-a (Reset)", "\(key): \(rows)")
        }
    }

    func testAValueWrittenWithoutAttributionIsStillRead() async throws {
        try await hostA.createFleet("kiosk.mode", "s", default: .string("a"))
        let defined = await hostB.waitFor("kiosk.mode", .string("a"))
        XCTAssertTrue(defined, diagnostics)
        // What an earlier propbusd wrote: the bare value, no attribution.
        _ = try etcd.put(key: Array(("/" + prefix + "/keys/kiosk.mode").utf8), value: ValueCodec.encode(.string("b")))
        let arrived = await hostB.waitFor("kiosk.mode", .string("b"))
        XCTAssertTrue(arrived, diagnostics)
        let rows = try await history(hostB, "kiosk.mode")
        XCTAssertEqual(rows.last?["via"] as? String, "fleet change", "\(rows)")
    }

    func testTheCreationAndDeletionOfAFleetKeyNameTheirCallerOnTheOtherHost() async throws {
        let created = try await hostA.propctl(["create", "kiosk.theme", "s", "--default", "light", "--scope", "fleet"])
        XCTAssertTrue(created.succeeded, "\(created)")
        let defined = await hostB.waitFor("kiosk.theme", .string("light"))
        XCTAssertTrue(defined, diagnostics)
        // A Reset deletes the value in etcd: its writer comes with the deletion too.
        let set = try await hostA.propctl(["set", "kiosk.theme", "dark"])
        XCTAssertTrue(set.succeeded, "\(set)")
        let reset = try await hostA.propctl(["reset", "kiosk.theme"])
        XCTAssertTrue(reset.succeeded, "\(reset)")
        let back = await hostB.waitFor("kiosk.theme", .string("light"))
        XCTAssertTrue(back, diagnostics)
        let deleted = try await hostA.propctl(["delete", "kiosk.theme"])
        XCTAssertTrue(deleted.succeeded, "\(deleted)")
        try await Fleet.barrier(from: hostA, to: hostB)

        let rows = try await history(hostB, "kiosk.theme")
        let creation = try XCTUnwrap(rows.first { $0["kind"] as? String == "created" }, "\(rows)")
        let deletion = try XCTUnwrap(rows.first { $0["kind"] as? String == "deleted" }, "\(rows)")
        XCTAssertEqual(creation["via"] as? String, "fleet change from fleet-host-a (CreateProperty)", "\(creation)")
        XCTAssertEqual(deletion["via"] as? String, "fleet change from fleet-host-a (DeleteProperty)", "\(deletion)")
        let resetRow = try XCTUnwrap(rows.last { $0["kind"] as? String == "changed" }, "\(rows)")
        XCTAssertEqual(resetRow["via"] as? String, "fleet change from fleet-host-a (Reset)", "\(resetRow)")
        for row in [creation, resetRow, deletion] {
            XCTAssertEqual(row["host"] as? String, "fleet-host-a", "\(row)")
            XCTAssertEqual(row["user"] as? String, "root", "\(row)")
            XCTAssertEqual(row["comm"] as? String, "propctl", "\(row)")
        }
    }

    func testADefinitionWrittenWithoutAttributionIsStillRead() async throws {
        // What an earlier propbusd wrote: type, default and options, no writer.
        let bytes = ValueCodec.encode(.vardict(["type": .string("s"), "default": .string("a"), "options": .vardict([:])]))
        _ = try etcd.put(key: Array(("/" + prefix + "/defs/kiosk.mode").utf8), value: bytes)
        let arrived = await hostB.waitFor("kiosk.mode", .string("a"))
        XCTAssertTrue(arrived, diagnostics)
        let rows = try await history(hostB, "kiosk.mode")
        XCTAssertEqual(rows.first?["via"] as? String, "fleet change", "\(rows)")
    }
}
