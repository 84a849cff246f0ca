import DBusValues
import XCTest
@testable import PropBus

/// Fleet layers in the model: a fleet key's fleet-mandatory value and fleet default
/// (from etcd), how they rank against local layer files, and that reloads and redefinitions
/// keep them.
final class FleetLayersModelTests: XCTestCase {
    private let lockSource = "fleet mandatory /pb/layers/mandatory/kiosk.volume"
    private let defaultSource = "fleet default /pb/layers/defaults/kiosk.volume"

    private func fleetModel() throws -> PropertyModel {
        let model = try PropertyModel(store: MemoryStore())
        _ = try model.create(key: "kiosk.volume", type: "i", defaultValue: .int32(50), options: ["scope": .string("fleet")])
        return model
    }

    private func apply(_ model: PropertyModel, lock: Int32?, for names: [String]? = nil, fleetDefault: Int32? = nil,
                       value: DBusValue? = nil) throws -> (changes: [PropertyChange], lockChanged: [Key], problems: [String]) {
        let mandatory = (value ?? lock.map { .int32($0) }).map { MandatoryValue(value: LayerValue(value: $0, source: lockSource), lockedFor: names) }
        return model.applyFleetLayers([(try Key("kiosk.volume"), mandatory, fleetDefault.map { LayerValue(value: .int32($0), source: defaultSource) },
                                        .fleetLayer(change: "mandatory /pb/layers/mandatory/kiosk.volume", caller: nil))], holding: [])
    }

    private func asCaller(_ model: PropertyModel, uid: UInt32?, _ body: () throws -> Void) rethrows {
        model.origin = .call(WriteSet.Caller(via: "Set", busName: ":1.9", userID: uid))
        defer { model.origin = .daemon }
        try body()
    }

    func testAFleetLockHidesTheUserValueRefusesWritesNamingTheEtcdKeyAndGoesWithOneChange() throws {
        let model = try fleetModel()
        _ = try model.set("kiosk.volume", to: .int32(55))
        let locked = try apply(model, lock: 20)
        XCTAssertEqual(locked.changes, [.valueChanged(try Key("kiosk.volume"), old: .int32(55))])
        XCTAssertEqual(locked.lockChanged.map(\.text), ["kiosk.volume"])
        let entry = try model.entry("kiosk.volume")
        XCTAssertEqual(entry.value, .int32(20))
        XCTAssertEqual(entry.valueLayer, .mandatory)
        XCTAssertEqual(entry.storedValue, .int32(55))
        XCTAssertTrue(model.isLocked(entry, forUser: 1000))
        try asCaller(model, uid: 1000) {
            XCTAssertThrowsError(try model.set("kiosk.volume", to: .int32(56))) { error in
                let error = error as! PropBusError
                XCTAssertEqual(error.code, .locked)
                XCTAssertTrue(error.message.contains(lockSource) && error.message.contains("propctl unlock kiosk.volume --fleet"), error.message)
            }
        }
        let unlocked = try apply(model, lock: nil)
        XCTAssertEqual(unlocked.changes, [.valueChanged(try Key("kiosk.volume"), old: .int32(20))])
        XCTAssertEqual(unlocked.lockChanged.map(\.text), ["kiosk.volume"])
        XCTAssertEqual(try model.value(of: "kiosk.volume"), .int32(55))
        XCTAssertNil(try model.entry("kiosk.volume").layers)
    }

    func testAFleetDefaultSitsBelowTheUserValueAndShowsAfterAReset() throws {
        let model = try fleetModel()
        _ = try model.set("kiosk.volume", to: .int32(70))
        let underUser = try apply(model, lock: nil, fleetDefault: 30)
        XCTAssertEqual(underUser.changes, [], "nothing clients see changed")
        XCTAssertEqual(underUser.lockChanged, [])
        _ = try model.reset("kiosk.volume")
        let entry = try model.entry("kiosk.volume")
        XCTAssertEqual(entry.value, .int32(30))
        XCTAssertEqual(entry.valueLayer, .site)
        XCTAssertEqual(entry.layers?.siteInForce?.source, defaultSource)
    }

    func testALocalMandatoryFileCannotChangeAFleetKeyAndAReloadKeepsTheFleetLayers() throws {
        let model = try fleetModel()
        _ = try apply(model, lock: 20, fleetDefault: 30)
        let files = LayerFileSet(entries: [LayerEntry(layer: .mandatory, target: .key(try Key("kiosk.volume")), value: 5, source: "/etc/propbus/mandatory.d/10-local.json"),
                                           LayerEntry(layer: .site, target: .key(try Key("kiosk.volume")), value: 6, source: "/etc/propbus/defaults.d/10-local.json")])
        let reloaded = model.applyLayerFiles(files)
        XCTAssertEqual(reloaded.changes, [])
        XCTAssertEqual(reloaded.lockChanged, [])
        XCTAssertEqual(try model.value(of: "kiosk.volume"), .int32(20), "the fleet's lock holds on this host too")
        XCTAssertEqual(model.layerProblems.count, 2, "\(model.layerProblems)")
        XCTAssertTrue(model.layerProblems.allSatisfy { $0.problem.contains("fleet key") }, "\(model.layerProblems)")
        // Redefined by the fleet with the same type: the layers stay.
        _ = try model.create(key: "kiosk.volume", type: "i", defaultValue: .int32(51), options: ["scope": .string("fleet")])
        XCTAssertEqual(try model.entry("kiosk.volume").layers?.fleetMandatory?.value.source, lockSource)
        _ = try apply(model, lock: nil, fleetDefault: 30)
        XCTAssertEqual(try model.value(of: "kiosk.volume"), .int32(30), "the fleet default, not the local file's")
    }

    func testAFleetLayerTheDefinitionRefusesIsSkippedWithAProblemAndALocalKeyTakesNone() throws {
        let model = try fleetModel()
        let refused = try apply(model, lock: nil, value: .string("loud"))
        XCTAssertEqual(refused.changes, [])
        XCTAssertEqual(refused.problems.count, 1)
        XCTAssertTrue(refused.problems[0].contains("kiosk.volume") && !refused.problems[0].contains("loud"), refused.problems[0])
        XCTAssertNil(try model.entry("kiosk.volume").layers)
        _ = try model.create(key: "local.volume", type: "i", defaultValue: .int32(50))
        let local = model.applyFleetLayers([(try Key("local.volume"), MandatoryValue(value: LayerValue(value: .int32(1), source: lockSource)), nil,
                                             .fleetLayer(change: "mandatory", caller: nil))], holding: [])
        XCTAssertEqual(local.changes, [])
        XCTAssertEqual(try model.value(of: "local.volume"), .int32(50))
    }
}
