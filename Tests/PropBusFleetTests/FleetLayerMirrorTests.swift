import DBus
import Etcd
import PropBus
@testable import PropBusFleet
@testable import PropBusService
import XCTest

/// The pure part of the fleet's layers: their keys in etcd, their encoding, and the mirror a
/// host keeps of them from watch events and full reads.
final class FleetLayerMirrorTests: XCTestCase {
    let layout = FleetLayout(prefix: "/pb/")
    let volume = try! Key("kiosk.volume")

    private func put(_ kind: FleetLayerKind, _ value: DBusValue, at revision: Int64, for names: [String]? = nil,
                     by caller: WriteSet.Caller? = nil) -> WatchEvent {
        WatchEvent(kind: .put, kv: KeyValue(key: layout.layerKey(kind, volume), value: FleetLayout.encodeLayer(value, lockedFor: names, attribution: caller, time: 7),
                                            modRevision: revision))
    }

    private func delete(_ kind: FleetLayerKind, at revision: Int64) -> WatchEvent {
        WatchEvent(kind: .delete, kv: KeyValue(key: layout.layerKey(kind, volume), modRevision: revision))
    }

    func testLayerKeysAreClassifiedBackAndAreNoValuesOrDefinitions() {
        XCTAssertEqual(layout.layerKey(.mandatory, volume), Array("/pb/layers/mandatory/kiosk.volume".utf8))
        XCTAssertEqual(layout.layerKey(.defaults, volume), Array("/pb/layers/defaults/kiosk.volume".utf8))
        XCTAssertEqual(layout.classifyLayer(layout.layerKey(.defaults, volume))?.target, .key(volume))
        XCTAssertEqual(layout.classifyLayer(layout.layerKey(.mandatory, volume))?.kind, .mandatory)
        XCTAssertEqual(layout.classify(layout.layerKey(.mandatory, volume)), .other)
        XCTAssertNil(layout.classifyLayer(Array("/pb/layers/other/kiosk.volume".utf8)))
        XCTAssertNil(layout.classifyLayer(Array("/pb/layers/mandatory/not a key".utf8)))
        XCTAssertNil(layout.classifyLayer(layout.valueKey(volume)))
    }

    func testALayerEntryKeepsItsValuePrincipalsAndWriter() throws {
        let caller = WriteSet.Caller(via: "SetFleetLayer", busName: ":1.4", userID: 0, userName: "root", host: "kiosk-1")
        let bytes = FleetLayout.encodeLayer(.int32(20), lockedFor: ["@students", "alice"], attribution: caller, time: 7)
        let decoded = try FleetLayout.decodeLayer(bytes)
        XCTAssertEqual(decoded.value, .int32(20))
        XCTAssertEqual(decoded.lockedFor, ["@students", "alice"])
        XCTAssertEqual(decoded.caller?.host, "kiosk-1")
        XCTAssertEqual(decoded.caller?.via, "SetFleetLayer")
        XCTAssertEqual(decoded.caller?.userName, "root")
        let bare = try FleetLayout.decodeLayer(FleetLayout.encodeLayer(.string("x"), lockedFor: nil, attribution: nil, time: 0))
        XCTAssertNil(bare.lockedFor)
        XCTAssertNil(bare.caller)
        XCTAssertThrowsError(try FleetLayout.decodeLayer(ValueCodec.encode(.int32(1))))
    }

    func testWatchEventsSetAndRemoveLayersAndAnOlderReplayChangesNothing() {
        var mirror = FleetLayerMirror()
        let set = mirror.apply([put(.mandatory, .int32(20), at: 10, for: ["alice"]), put(.defaults, .int32(30), at: 10)], layout: layout)
        XCTAssertEqual(set.changes.map(\.key), [volume])
        XCTAssertEqual(set.changes.first?.change, "defaults /pb/layers/defaults/kiosk.volume")
        XCTAssertEqual(mirror.layers[volume]?.mandatory?.value, .int32(20))
        XCTAssertEqual(mirror.layers[volume]?.mandatory?.lockedFor, ["alice"])
        XCTAssertEqual(mirror.layers[volume]?.mandatory?.source, "fleet mandatory /pb/layers/mandatory/kiosk.volume")
        XCTAssertEqual(mirror.layers[volume]?.defaults?.source, "fleet default /pb/layers/defaults/kiosk.volume")

        let removed = mirror.apply([delete(.mandatory, at: 12)], layout: layout)
        XCTAssertEqual(removed.changes.first?.change, "mandatory /pb/layers/mandatory/kiosk.volume removed")
        XCTAssertNil(removed.changes.first?.layers.mandatory)
        XCTAssertEqual(removed.changes.first?.layers.defaults?.value, .int32(30))
        // A watch resumed from an older cursor replays the put: it is older than the deletion.
        let replayed = mirror.apply([put(.mandatory, .int32(20), at: 10)], layout: layout)
        XCTAssertEqual(replayed.changes, [])
        XCTAssertNil(mirror.layers[volume]?.mandatory)
        // The same value again changes nothing either.
        XCTAssertEqual(mirror.apply([put(.defaults, .int32(30), at: 13)], layout: layout).changes, [])
    }

    func testAFullReadRemovesTheLayersItLacksAndStandsOverTheMirrorsRevisions() {
        var mirror = FleetLayerMirror()
        _ = mirror.apply([put(.mandatory, .int32(20), at: 50), put(.defaults, .int32(30), at: 51)], layout: layout)
        // etcd went back in time: its revisions are lower, and it holds only the default.
        let snapshot = mirror.apply([put(.defaults, .int32(31), at: 5)], layout: layout, snapshot: true, revision: 6)
        XCTAssertEqual(snapshot.changes.map(\.key), [volume])
        XCTAssertNil(mirror.layers[volume]?.mandatory)
        XCTAssertEqual(mirror.layers[volume]?.defaults?.value, .int32(31))
        XCTAssertEqual(snapshot.changes.first?.layers, mirror.layers[volume])
        // An empty full read: nothing is left.
        let empty = mirror.apply([], layout: layout, snapshot: true, revision: 7)
        XCTAssertEqual(empty.changes.map(\.key), [volume])
        XCTAssertNil(mirror.layers[volume])
    }

    func testAnUnreadableEntryIsAProblemAndHoldsNoLayer() {
        var mirror = FleetLayerMirror()
        _ = mirror.apply([put(.mandatory, .int32(20), at: 3)], layout: layout)
        let bad = WatchEvent(kind: .put, kv: KeyValue(key: layout.layerKey(.mandatory, volume), value: [0xFF, 0x00], modRevision: 4))
        let applied = mirror.apply([bad], layout: layout)
        XCTAssertEqual(applied.problems.count, 1)
        XCTAssertTrue(applied.problems[0].contains("/pb/layers/mandatory/kiosk.volume"), applied.problems[0])
        XCTAssertNil(mirror.layers[volume], "an entry that cannot be read locks nothing")
    }

    private func put(_ kind: FleetLayerKind, _ target: LayerEntry.Target, _ value: DBusValue, at revision: Int64) -> WatchEvent {
        WatchEvent(kind: .put, kv: KeyValue(key: layout.layerKey(kind, target), value: FleetLayout.encodeLayer(value, lockedFor: nil, attribution: nil, time: 7),
                                            modRevision: revision))
    }

    func testAGroupPrefixEntryLayersEveryFleetKeyOfItsGroupNowAndLaterAndAKeyEntryWinsOverIt() throws {
        let mode = try Key("kiosk.mode"), other = try Key("lab.volume"), group = LayerEntry.Target.prefix("kiosk.")
        XCTAssertEqual(layout.layerKey(.mandatory, group), Array("/pb/layers/mandatory/kiosk.*".utf8))
        XCTAssertEqual(layout.classifyLayer(layout.layerKey(.mandatory, group))?.target, group)
        XCTAssertNil(layout.classifyLayer(Array("/pb/layers/mandatory/.*".utf8)))
        let keys = { (prefix: String) in [self.volume, mode, other].filter { $0.text.hasPrefix(prefix) } }
        var mirror = FleetLayerMirror()
        let set = mirror.apply([put(.mandatory, group, .int32(20), at: 10)], layout: layout, keys: keys)
        XCTAssertEqual(set.changes.map(\.key), [mode, volume])
        XCTAssertEqual(set.changes.first?.change, "mandatory /pb/layers/mandatory/kiosk.*")
        XCTAssertEqual(mirror.layers[volume]?.mandatory?.value, .int32(20))
        XCTAssertEqual(mirror.layers[volume]?.mandatory?.source, "fleet mandatory /pb/layers/mandatory/kiosk.*")
        XCTAssertNil(mirror.layers[other])
        // A key the fleet defines later is layered as well: the lookup resolves the prefix.
        XCTAssertEqual(mirror.layers[try Key("kiosk.brightness")]?.mandatory?.value, .int32(20))

        // The key's own entry wins over its group's, as in mandatory.d files.
        let own = mirror.apply([put(.mandatory, .int32(25), at: 11)], layout: layout, keys: keys)
        XCTAssertEqual(own.changes.map(\.key), [volume])
        XCTAssertEqual(mirror.layers[volume]?.mandatory?.value, .int32(25))
        let removed = mirror.apply([WatchEvent(kind: .delete, kv: KeyValue(key: layout.layerKey(.mandatory, group), modRevision: 12))], layout: layout, keys: keys)
        XCTAssertEqual(removed.changes.map(\.key), [mode], "the key's own entry still holds")
        XCTAssertEqual(removed.changes.first?.change, "mandatory /pb/layers/mandatory/kiosk.* removed")
        XCTAssertNil(mirror.layers[mode])
        XCTAssertEqual(mirror.layers[volume]?.mandatory?.value, .int32(25))

        // A full read holding only a group default: the key's lock goes, the default covers both.
        let snapshot = mirror.apply([put(.defaults, group, .int32(30), at: 13)], layout: layout, snapshot: true, revision: 14, keys: keys)
        XCTAssertEqual(Set(snapshot.changes.map(\.key)), [mode, volume])
        XCTAssertNil(mirror.layers[volume]?.mandatory)
        XCTAssertEqual(mirror.layers[mode]?.defaults?.value, .int32(30))
        XCTAssertEqual(mirror.layers[volume]?.defaults?.source, "fleet default /pb/layers/defaults/kiosk.*")
    }

    func testARemovalNamesItsRemoverFromTheDeletionRecordOfItsRevision() {
        var mirror = FleetLayerMirror()
        _ = mirror.apply([put(.mandatory, .int32(20), at: 10)], layout: layout)
        let remover = WriteSet.Caller(via: "RemoveFleetLayer", busName: ":1.9", userID: 0, userName: "root", host: "kiosk-2")
        XCTAssertEqual(layout.classify(layout.deleterKey), .other)
        XCTAssertNil(layout.classifyLayer(layout.deleterKey))
        let record = { (revision: Int64) in
            WatchEvent(kind: .put, kv: KeyValue(key: self.layout.deleterKey, value: FleetLayout.encodeDeleter(remover, time: 8), modRevision: revision))
        }
        let removed = mirror.apply([record(12), delete(.mandatory, at: 12)], layout: layout)
        XCTAssertEqual(removed.changes.first?.change, "mandatory /pb/layers/mandatory/kiosk.volume removed")
        XCTAssertEqual(removed.changes.first?.caller?.host, "kiosk-2")
        XCTAssertEqual(removed.changes.first?.caller?.via, "RemoveFleetLayer")
        XCTAssertEqual(removed.changes.first?.caller?.userName, "root")
        // A record of another revision is another deletion's.
        _ = mirror.apply([put(.mandatory, .int32(20), at: 13)], layout: layout)
        let other = mirror.apply([record(14), delete(.mandatory, at: 15)], layout: layout)
        XCTAssertEqual(other.changes.count, 1)
        XCTAssertNil(other.changes.first?.caller)
    }
}
