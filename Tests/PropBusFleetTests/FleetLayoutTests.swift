import DBus
import Etcd
import PropBus
@testable import PropBusFleet
@testable import PropBusService
import XCTest

/// The pure parts of the fleet: the etcd layout, definitions as etcd holds them, one call's
/// writes as one transaction (compares, operations, limits) and the --fleet URL.
final class FleetLayoutTests: XCTestCase {
    let layout = FleetLayout(prefix: "/pb/")
    let volume = try! Key("settings.volume")
    let absent: PropertyModel.Entry? = nil

    private func entry(_ key: Key, _ type: DBusType, _ defaultValue: DBusValue, stored: DBusValue? = nil,
                       scope: PropertyScope = .fleet) -> PropertyModel.Entry {
        var definition = PropertyDefinition(key: key, type: type, defaultValue: defaultValue)
        definition.scope = scope
        return PropertyModel.Entry(definition: definition, storedValue: stored, revision: 1)
    }

    private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    func testKeysOfTheLayoutAreClassifiedBackToTheirKeys() {
        XCTAssertEqual(layout.valueKey(volume), bytes("/pb/keys/settings.volume"))
        XCTAssertEqual(layout.definitionKey(volume), bytes("/pb/defs/settings.volume"))
        XCTAssertEqual(layout.classify(layout.valueKey(volume)), .value(volume))
        XCTAssertEqual(layout.classify(layout.definitionKey(volume)), .definition(volume))
        XCTAssertEqual(layout.classify(layout.hostKey("kiosk-7")), .host("kiosk-7"))
        XCTAssertEqual(layout.classify(bytes("/pb/keys/not a key")), .other)
        XCTAssertEqual(layout.classify(bytes("/other/keys/settings.volume")), .other)
    }

    func testAModelFileMayDeclareAFleetKeyTheFleetHoldsOnlyAsTheFleetDefinesIt() {
        var fleet = PropertyDefinition(key: volume, type: .int32, defaultValue: .int32(50))
        fleet.scope = .fleet
        let shared = FleetLayout.sharedDefinitions { $0 == self.volume }
        XCTAssertTrue(shared.contains(fleet))
        var local = fleet
        local.scope = .local
        XCTAssertFalse(shared.contains(local), "a local key is not the fleet's")
        var other = fleet
        other.key = try! Key("settings.other")
        XCTAssertFalse(shared.contains(other), "a fleet key etcd does not hold yet is the file's to offer")

        // The same definition from a file: only host-local parts (source) differ.
        var same = fleet
        same.source = "/etc/propbus/models/audio.json"
        XCTAssertNil(shared.refusal(fleet, same))
        var changed = same
        changed.defaultValue = .int32(70)
        changed.maximum = .int32(90)
        let refusal = shared.refusal(fleet, changed) ?? ""
        XCTAssertTrue(refusal.contains("default: fleet 50, file 70") && refusal.contains("maximum: fleet none, file 90"), refusal)
        XCTAssertTrue(refusal.contains("propctl create --scope fleet"), refusal)
        XCTAssertFalse(refusal.contains("source"), refusal)
        let madeLocal = shared.refusal(fleet, local) ?? ""
        XCTAssertTrue(madeLocal.contains("scope: fleet \"fleet\", file \"local\""), madeLocal)
    }

    func testDefinitionRoundTripsWithoutHostLocalPartsAndComesBackFleetScoped() throws {
        var definition = PropertyDefinition(key: volume, type: .int32, defaultValue: .int32(50))
        definition.minimum = .int32(0)
        definition.maximum = .int32(100)
        definition.description = "Speaker volume"
        definition.source = "/etc/propbus/models/audio.json"
        definition.scope = .fleet
        let (type, defaultValue, options) = try FleetLayout.decodeDefinition(FleetLayout.encodeDefinition(definition), key: volume)
        XCTAssertEqual(type, "i")
        XCTAssertEqual(defaultValue, .int32(50))
        XCTAssertEqual(options["minimum"], .int32(0))
        XCTAssertEqual(options["maximum"], .int32(100))
        XCTAssertEqual(options["description"], .string("Speaker volume"))
        XCTAssertEqual(options["scope"], .string("fleet"))
        XCTAssertNil(options["source"], "the model file's path means nothing on another host")
        // What the other host does with it: the same definition, source aside.
        var rebuilt = PropertyDefinition(key: volume, type: .int32, defaultValue: defaultValue)
        _ = try rebuilt.apply(options: options)
        definition.source = nil
        XCTAssertEqual(rebuilt, definition)
    }

    func testSetOfAFleetKeyPutsItsValueGuardedByItsKnownRevisions() throws {
        let before = entry(volume, .int32, .int32(5), stored: .int32(1))
        let after = entry(volume, .int32, .int32(5), stored: .int32(7))
        let plan = try layout.transaction(before: [volume: before], after: [volume: after], read: [],
                                          isFleet: { _ in true }, known: { _ in FleetRevisions(value: 12, definition: 3) })
        XCTAssertEqual(plan.compares, [Compare.modRevision(of: layout.definitionKey(volume), is: 3), .modRevision(of: layout.valueKey(volume), is: 12)])
        XCTAssertEqual(plan.success, [RequestOp.put(layout.valueKey(volume), FleetLayout.encodeValue(.int32(7)))])
        XCTAssertEqual(plan.failure, [RequestOp.get(layout.definitionKey(volume)), .get(layout.valueKey(volume))])
        XCTAssertEqual(plan.written, [volume])
        XCTAssertEqual(plan.writesValue, [volume])
        XCTAssertEqual(plan.writesDefinition, [])
    }

    func testAWriteThatLostSeveralRacesStillComparesDefinitionsButNotItsOwnValues() throws {
        let before = entry(volume, .int32, .int32(5), stored: .int32(1))
        let after = entry(volume, .int32, .int32(5), stored: .int32(7))
        let plan = try layout.transaction(before: [volume: before], after: [volume: after], read: [], comparingWrittenValues: false,
                                          isFleet: { _ in true }, known: { _ in FleetRevisions(value: 12, definition: 3) })
        XCTAssertEqual(plan.compares, [Compare.modRevision(of: layout.definitionKey(volume), is: 3)])
        XCTAssertEqual(plan.success, [RequestOp.put(layout.valueKey(volume), FleetLayout.encodeValue(.int32(7)))])
    }

    /// A fleet key whose definition etcd does not hold (its offer failed or has not run yet):
    /// a write carries the definition, or its value would reach no other host (they have no
    /// definition to put it under).
    func testAWriteOfAFleetKeyWhoseDefinitionEtcdLacksCarriesTheDefinition() throws {
        let before = entry(volume, .int32, .int32(5), stored: .int32(1))
        let after = entry(volume, .int32, .int32(5), stored: .int32(7))
        let plan = try layout.transaction(before: [volume: before], after: [volume: after], read: [],
                                          isFleet: { _ in true }, known: { _ in FleetRevisions() })
        XCTAssertEqual(plan.compares.first, Compare.modRevision(of: layout.definitionKey(volume), is: 0))
        XCTAssertEqual(plan.success, [RequestOp.put(layout.definitionKey(volume), FleetLayout.encodeDefinition(after.definition)),
                                      .put(layout.valueKey(volume), FleetLayout.encodeValue(.int32(7)))])
        XCTAssertEqual(plan.writesDefinition, [volume])
        // Deleted by the fleet (negative), declared here again: etcd lacks it as well.
        let again = try layout.transaction(before: [volume: before], after: [volume: after], read: [],
                                           isFleet: { _ in true }, known: { _ in FleetRevisions(value: -9, definition: -9) })
        XCTAssertEqual(again.writesDefinition, [volume])
    }

    func testResetDeletesTheValueAndADeletedKeyComparesAsAbsent() throws {
        let before = entry(volume, .int32, .int32(5), stored: .int32(1))
        let after = entry(volume, .int32, .int32(5))
        // The mirror saw the value deleted once at 9 (negative): absent now, so compared with 0.
        let plan = try layout.transaction(before: [volume: before], after: [volume: after], read: [],
                                          isFleet: { _ in true }, known: { _ in FleetRevisions(value: -9, definition: 3) })
        XCTAssertEqual(plan.compares.last, Compare.modRevision(of: layout.valueKey(volume), is: 0))
        XCTAssertEqual(plan.success, [RequestOp.delete(layout.valueKey(volume))])
    }

    func testCreateAndDeleteWriteTheDefinitionAndLocalKeysAreLeftOut() throws {
        let local = try Key("ui.theme")
        let created = entry(volume, .int32, .int32(5), stored: .int32(8))
        let plan = try layout.transaction(before: [volume: absent, local: absent],
                                          after: [volume: created, local: entry(local, .string, .string("light"), scope: .local)],
                                          read: [], isFleet: { $0 == self.volume }, known: { _ in FleetRevisions() })
        XCTAssertEqual(plan.compares, [Compare.modRevision(of: layout.definitionKey(volume), is: 0), .modRevision(of: layout.valueKey(volume), is: 0)])
        XCTAssertEqual(plan.success, [RequestOp.put(layout.definitionKey(volume), FleetLayout.encodeDefinition(created.definition)),
                                      .put(layout.valueKey(volume), FleetLayout.encodeValue(.int32(8)))])
        let deleted = try layout.transaction(before: [volume: created], after: [volume: absent], read: [],
                                             isFleet: { _ in true }, known: { _ in FleetRevisions(value: 20, definition: 20) })
        XCTAssertEqual(deleted.success, [RequestOp.delete(layout.definitionKey(volume)), .delete(layout.valueKey(volume))])
    }

    func testFleetKeysTheBindingsReadAreComparedToo() throws {
        let source = try Key("settings.base")
        let before = entry(volume, .int32, .int32(5), stored: .int32(1))
        let after = entry(volume, .int32, .int32(5), stored: .int32(2))
        let plan = try layout.transaction(before: [volume: before], after: [volume: after], read: [source, try Key("local.x")],
                                          isFleet: { $0 != (try! Key("local.x")) }, known: { $0 == source ? FleetRevisions(value: 44) : FleetRevisions(value: 1, definition: 1) })
        XCTAssertTrue(plan.compares.contains(Compare.modRevision(of: layout.valueKey(source), is: 44)))
        XCTAssertEqual(plan.compares.count, 3, "local.x is local: etcd knows nothing of it")
    }

    func testAFleetKeyCannotBecomeLocal() {
        let before = entry(volume, .int32, .int32(5))
        let after = entry(volume, .int32, .int32(5), scope: .local)
        XCTAssertThrowsError(try layout.transaction(before: [volume: before], after: [volume: after], read: [],
                                                    isFleet: { _ in true }, known: { _ in FleetRevisions() })) { error in
            XCTAssertEqual((error as? PropBusError)?.code, .invalidArgs)
        }
    }

    func testRoundsAboveEtcdsLimitsAreRefusedWithLimitsExceeded() throws {
        var before: [Key: PropertyModel.Entry?] = [:], after: [Key: PropertyModel.Entry?] = [:]
        for index in 0..<65 {
            let key = try Key("many.k\(index)")
            before[key] = entry(key, .int32, .int32(0), stored: .int32(1))
            after[key] = entry(key, .int32, .int32(0), stored: .int32(2))
        }
        XCTAssertThrowsError(try layout.transaction(before: before, after: after, read: [], isFleet: { _ in true }, known: { _ in FleetRevisions() })) { error in
            XCTAssertEqual((error as? PropBusError)?.code, .limitsExceeded)
            XCTAssertTrue((error as? PropBusError)?.message.contains("128") ?? false, "\(error)")
        }
        let big = try Key("big.blob")
        let large = DBusValue.string(String(repeating: "x", count: 1_300_000))
        XCTAssertThrowsError(try layout.transaction(before: [big: entry(big, .string, .string(""))],
                                                    after: [big: entry(big, .string, .string(""), stored: large)], read: [],
                                                    isFleet: { _ in true }, known: { _ in FleetRevisions() })) { error in
            XCTAssertEqual((error as? PropBusError)?.code, .limitsExceeded)
            XCTAssertTrue((error as? PropBusError)?.message.contains("1.5 MiB") ?? false, "\(error)")
        }
    }

    func testFleetURLGivesMembersAndPrefix() throws {
        let configuration = try FleetConfiguration.parse("etcd://10.0.0.1:2379,10.0.0.2:2379/propbus")
        XCTAssertEqual(configuration.members, ["10.0.0.1:2379", "10.0.0.2:2379"])
        XCTAssertEqual(configuration.prefix, "/propbus/")
        XCTAssertEqual(configuration.endpoints, ["http://10.0.0.1:2379", "http://10.0.0.2:2379"])
        XCTAssertEqual(try FleetConfiguration.parse("etcds://h:2379/a/b/").endpoints, ["https://h:2379"])
        XCTAssertEqual(try FleetConfiguration.parse("etcds://h:2379/a/b/").prefix, "/a/b/")
        for bad in ["http://h:2379/p", "etcd://h:2379", "etcd://h:2379/", "etcd://h/p", "etcd://h:0/p", "etcd://:2379/p"] {
            XCTAssertThrowsError(try FleetConfiguration.parse(bad), bad)
        }
    }

    func testCredentialsFileReadableByEveryoneIsRefused() throws {
        let path = NSTemporaryDirectory() + "fleet-credentials-\(getpid())"
        defer { unlink(path) }
        _ = FileManager.default.createFile(atPath: path, contents: Data("propbus:s3cr:et\n".utf8), attributes: [.posixPermissions: 0o644])
        var configuration = try FleetConfiguration.parse("etcd://h:2379/p")
        configuration.credentialsFile = path
        XCTAssertThrowsError(try configuration.etcdOptions()) { error in
            XCTAssertTrue("\(error)".contains("readable by everyone"), "\(error)")
        }
        chmod(path, 0o600)
        XCTAssertEqual(try configuration.etcdOptions().credentials, .init(user: "propbus", password: "s3cr:et"))
    }

    func testAModelFileDifferingFromASecretFleetKeyIsRefusedWithoutQuotingItsValues() throws {
        let refusal = FleetLayout.sharedDefinitions { _ in true }.refusal
        var fleet = PropertyDefinition(key: try Key("vault.pin"), type: .string, defaultValue: .string("fleet-hunter2"))
        fleet.scope = .fleet
        var file = fleet
        file.defaultValue = .string("file-hunter3")
        let open = try XCTUnwrap(refusal(fleet, file))
        XCTAssertTrue(open.contains("fleet-hunter2") && open.contains("file-hunter3"), "not secret: the values help (\(open))")
        fleet.secret = true
        file.secret = true
        let secret = try XCTUnwrap(refusal(fleet, file))
        XCTAssertFalse(secret.contains("hunter"), secret)
        XCTAssertTrue(secret.contains("default differs (value refused)"), secret)
    }

    func testAValueCarriesItsAttributionAndABareValueReadsWithout() throws {
        let caller = WriteSet.Caller(via: "Set", busName: ":1.7", userID: 1000, userName: "alice", processID: 42,
                                     command: "propctl", executable: "/usr/bin/propctl", unit: "session-1.scope", host: "kiosk-3")
        let bytes = FleetLayout.encodeValue(.int32(40), attribution: caller, time: 1_796_119_200_000_000_000)
        let (value, read) = try FleetLayout.decodeAttributedValue(bytes)
        XCTAssertEqual(value, .int32(40))
        XCTAssertEqual(read, caller)
        XCTAssertEqual(try FleetLayout.decodeValue(bytes), .int32(40))
        let bare = try FleetLayout.decodeAttributedValue(ValueCodec.encode(.int32(40)))
        XCTAssertEqual(bare.value, .int32(40))
        XCTAssertNil(bare.caller)
        XCTAssertThrowsError(try FleetLayout.decodeAttributedValue(Array(bytes.prefix(7))), "truncated")
    }

    func testADefinitionCarriesItsWriterADeletionItsDeleterAndABareDefinitionReadsWithout() throws {
        let caller = WriteSet.Caller(via: "CreateProperty", busName: ":1.7", userID: 0, userName: "root", command: "propctl", host: "kiosk-1")
        var definition = PropertyDefinition(key: volume, type: .int32, defaultValue: .int32(50))
        definition.scope = .fleet
        let bytes = FleetLayout.encodeDefinition(definition, attribution: caller, time: 7)
        XCTAssertEqual(FleetLayout.definitionCaller(bytes), caller)
        let (type, defaultValue, options) = try FleetLayout.decodeDefinition(bytes, key: volume)
        XCTAssertEqual(type, "i")
        XCTAssertEqual(defaultValue, .int32(50))
        XCTAssertNil(options["by"], "the writer is no option of the key")
        XCTAssertNil(FleetLayout.definitionCaller(FleetLayout.encodeDefinition(definition)), "an earlier propbusd's definition")
        XCTAssertEqual(try FleetLayout.decodeDefinition(FleetLayout.encodeDefinition(definition), key: volume).type, "i")

        let created = entry(volume, .int32, .int32(5))
        let plan = try layout.transaction(before: [volume: absent], after: [volume: created], read: [], attribution: caller, time: 7,
                                          isFleet: { _ in true }, known: { _ in FleetRevisions() })
        XCTAssertEqual(plan.success, [RequestOp.put(layout.definitionKey(volume), FleetLayout.encodeDefinition(created.definition, attribution: caller, time: 7))])
        var deleter = caller
        deleter.via = "DeleteProperty"
        let deleted = try layout.transaction(before: [volume: created], after: [volume: absent], read: [], attribution: deleter, time: 8,
                                             isFleet: { _ in true }, known: { _ in FleetRevisions(value: 20, definition: 20) })
        XCTAssertEqual(deleted.success, [RequestOp.delete(layout.definitionKey(volume)), .delete(layout.valueKey(volume)),
                                         .put(layout.deleterKey, FleetLayout.encodeDeleter(deleter, time: 8))])
        // Every host reads who deleted from the record of the deletion's revision.
        let events = [WatchEvent(kind: .delete, kv: KeyValue(key: layout.definitionKey(volume), modRevision: 30)),
                      WatchEvent(kind: .put, kv: KeyValue(key: layout.deleterKey, value: FleetLayout.encodeDeleter(deleter, time: 8), modRevision: 30))]
        XCTAssertEqual(layout.deleters(in: events), [30: deleter])
    }
}
