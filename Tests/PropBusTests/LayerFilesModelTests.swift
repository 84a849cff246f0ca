import DBusValues
import XCTest
@testable import PropBus

/// Layer files in the model: typed per key, waiting for keys created later, locking
/// writes by the lock's principals, the user's value kept hidden under a lock.
final class LayerFilesModelTests: XCTestCase {
    private let lockFile = "/etc/propbus/mandatory.d/10-lock.json"
    private let siteFile = "/etc/propbus/defaults.d/10-site.json"

    private func entry(_ layer: ValueLayer, _ key: String, _ value: JSONValue, for names: [String]? = nil, file: String? = nil) throws -> LayerEntry {
        let target: LayerEntry.Target = key.hasSuffix(".*") ? .prefix(String(key.dropLast())) : .key(try Key(key))
        return LayerEntry(layer: layer, target: target, value: value, lockedFor: names, source: file ?? (layer == .mandatory ? lockFile : siteFile))
    }

    private func asCaller(_ model: PropertyModel, uid: UInt32?, _ body: () throws -> Void) rethrows {
        model.origin = .call(WriteSet.Caller(via: "Set", busName: ":1.9", userID: uid))
        defer { model.origin = .daemon }
        try body()
    }

    func testALockHidesTheUserValueRefusesWritesAndTheUserValueReturnsWhenItGoes() throws {
        let model = try PropertyModel(store: MemoryStore())
        _ = try model.create(key: "settings.volume", type: "i", defaultValue: .int32(50))
        _ = model.applyLayerFiles(LayerFileSet(entries: [try entry(.site, "settings.volume", 30)]))
        XCTAssertEqual(try model.value(of: "settings.volume"), .int32(30))
        try asCaller(model, uid: 1000) { _ = try model.set("settings.volume", to: .int32(55)) }
        let locked = model.applyLayerFiles(LayerFileSet(entries: [try entry(.site, "settings.volume", 30), try entry(.mandatory, "settings.volume", 20)]))
        XCTAssertEqual(locked.changes.map(\.key.text), ["settings.volume"])
        XCTAssertEqual(locked.lockChanged.map(\.text), ["settings.volume"])
        XCTAssertEqual(try model.value(of: "settings.volume"), .int32(20))
        XCTAssertEqual(try model.entry("settings.volume").storedValue, .int32(55), "the user's value is kept")
        try asCaller(model, uid: 1000) {
            XCTAssertThrowsError(try model.set("settings.volume", to: .int32(56))) { error in
                let error = error as! PropBusError
                XCTAssertEqual(error.code, .locked)
                XCTAssertTrue(error.message.contains(lockFile) && error.message.contains("settings.volume"), error.message)
            }
            XCTAssertThrowsError(try model.reset("settings.volume"))
            XCTAssertThrowsError(try model.apply(set: [("settings.volume", .int32(1))], reset: []))
        }
        // Root writes the user's layer; the lock still shows.
        try asCaller(model, uid: 0) { XCTAssertEqual(try model.set("settings.volume", to: .int32(60)), []) }
        XCTAssertEqual(try model.value(of: "settings.volume"), .int32(20))
        let unlocked = model.applyLayerFiles(LayerFileSet(entries: [try entry(.site, "settings.volume", 30)]))
        XCTAssertEqual(unlocked.changes, [.valueChanged(try Key("settings.volume"), old: .int32(20))])
        XCTAssertEqual(try model.value(of: "settings.volume"), .int32(60))
        // Reset falls back to the site default, not the definition's.
        try asCaller(model, uid: 1000) { _ = try model.reset("settings.volume") }
        XCTAssertEqual(try model.value(of: "settings.volume"), .int32(30))
    }

    func testALockForAGroupRefusesOnlyItsMembers() throws {
        let model = try PropertyModel(store: MemoryStore())
        model.lockAuthority = LockAuthority(daemonUserID: 0, checksCredentials: true,
                                            accounts: .table(users: ["alice": 1001], groups: ["students": 500], memberships: [1001: [500], 1002: [100]]))
        _ = try model.create(key: "settings.volume", type: "i", defaultValue: .int32(50))
        _ = model.applyLayerFiles(LayerFileSet(entries: [try entry(.mandatory, "settings.volume", 20, for: ["@students"])]))
        let mandatory = try XCTUnwrap(model.entry("settings.volume").layers?.mandatory)
        XCTAssertTrue(model.lockAuthority.locks(mandatory, userID: 1001))
        XCTAssertFalse(model.lockAuthority.locks(mandatory, userID: 1002))
        XCTAssertFalse(model.lockAuthority.locks(mandatory, userID: 0))
        XCTAssertFalse(LockAuthority.rootOnly.locks(MandatoryValue(value: mandatory.value), userID: 0))
        let session = LockAuthority(daemonUserID: 1000, checksCredentials: false, accounts: .table(users: [:], groups: [:]))
        XCTAssertTrue(session.locks(MandatoryValue(value: mandatory.value), userID: nil), "on a session bus the daemon's user is locked too")
        let system = LockAuthority(daemonUserID: 1000, checksCredentials: true, accounts: .table(users: [:], groups: [:]))
        XCTAssertFalse(system.locks(MandatoryValue(value: mandatory.value), userID: 1000), "the system daemon's own user is privileged")
    }

    func testEntriesWaitForKeysCreatedLaterAndARefusedValueIsAProblemWithoutTheValue() throws {
        let model = try PropertyModel(store: MemoryStore())
        var reported: [LayerProblem] = []
        model.layerProblemHandler = { reported.append($0) }
        _ = model.applyLayerFiles(LayerFileSet(entries: [try entry(.site, "ui.*", 12), try entry(.vendor, "ui.size", 10),
                                                         try entry(.site, "ui.pin", 123456)]))
        XCTAssertTrue(model.layerProblems.isEmpty)
        _ = try model.create(key: "ui.size", type: "i", defaultValue: .int32(8))
        XCTAssertEqual(try model.value(of: "ui.size"), .int32(12), "site above vendor")
        XCTAssertEqual(try model.entry("ui.size").valueLayer, .site)
        _ = try model.create(key: "ui.pin", type: "s", defaultValue: .string(""), options: ["secret": .boolean(true)])
        XCTAssertEqual(try model.value(of: "ui.pin"), .string(""))
        XCTAssertEqual(reported.count, 2, "the prefix's 12 and the key's 123456 are not strings: \(reported)")
        XCTAssertTrue(reported.allSatisfy { $0.key == "ui.pin" && $0.file == siteFile })
        XCTAssertFalse(reported.contains { $0.problem.contains("123456") }, "never the value: \(reported)")
    }

    func testABindingThatWouldWriteALockedKeyFailsTheWriteWithLocked() throws {
        let model = try PropertyModel(store: MemoryStore())
        _ = try model.create(key: "a.source", type: "i", defaultValue: .int32(1))
        _ = try model.create(key: "a.target", type: "i", defaultValue: .int32(1))
        _ = try model.bind(key: "a.target", to: "a.source", options: [:], owner: nil)
        _ = model.applyLayerFiles(LayerFileSet(entries: [try entry(.mandatory, "a.target", 20)]))
        XCTAssertEqual(try model.value(of: "a.source"), .int32(20), "the lock's value spreads as any change does")
        try asCaller(model, uid: 1000) {
            XCTAssertThrowsError(try model.set("a.source", to: .int32(5))) { XCTAssertEqual(($0 as? PropBusError)?.code, .locked) }
        }
        XCTAssertEqual(try model.value(of: "a.source"), .int32(20), "nothing changed")
    }

    func testFleetKeysTakeNoLayerValues() throws {
        let model = try PropertyModel(store: MemoryStore())
        _ = try model.create(key: "fleet.motd", type: "s", defaultValue: .string("hi"), options: ["scope": .string("fleet")])
        _ = model.applyLayerFiles(LayerFileSet(entries: [try entry(.mandatory, "fleet.motd", "locked")]))
        XCTAssertEqual(try model.value(of: "fleet.motd"), .string("hi"))
        XCTAssertTrue(model.layerProblems.first?.problem.contains("fleet key") == true, "\(model.layerProblems)")
    }

    func testEachLayerChangeIsRecordedWithItsFileAsOrigin() throws {
        let model = try PropertyModel(store: MemoryStore())
        _ = try model.create(key: "settings.volume", type: "i", defaultValue: .int32(50))
        model.commitRound()
        model.endWriteSet()
        _ = model.applyLayerFiles(LayerFileSet(entries: [try entry(.mandatory, "settings.volume", 20)]))
        let changes = model.takeWriteSet().changes
        XCTAssertEqual(changes.map(\.origin), [.layerFile(path: lockFile)])
        XCTAssertEqual(changes.first?.entries.first?.after?.value, .int32(20))
    }
}
