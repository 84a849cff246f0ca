import DBusValues
import XCTest
@testable import PropBus

/// The model's leased overrides and ephemeral keys (docs/layers.md, "Overrides"), without a bus.
final class OverrideModelTests: XCTestCase {
    private let first = LeaseHolder(busName: ":1.5", userID: 1000, processID: 50, command: "mpv")
    private let second = LeaseHolder(busName: ":1.6", userID: 1000)

    private func model(quotas: Quotas = .off) throws -> PropertyModel {
        let model = try PropertyModel(store: MemoryStore())
        model.quotas = quotas
        _ = try model.create(key: "display.idleDelay", type: "u", defaultValue: .uint32(300))
        _ = try model.set("display.idleDelay", to: .uint32(600))
        model.commitRound()
        model.endWriteSet()
        return model
    }

    private func value(_ model: PropertyModel) throws -> DBusValue { try model.value(of: "display.idleDelay") }

    private func valueChanges(_ changes: [PropertyChange]) -> [DBusValue] {
        changes.compactMap { if case .valueChanged(_, let old) = $0 { old } else { nil } }
    }

    func testTheLatestOverrideWinsAndEndingAnyOneFallsBackInOrder() throws {
        let model = try model()
        let a = try model.override("display.idleDelay", with: .uint32(10), holder: first, now: 1, expires: nil)
        XCTAssertEqual(valueChanges(a.changes), [.uint32(600)], "one change, from the user's value")
        let b = try model.override("display.idleDelay", with: .uint32(20), holder: second, now: 2, expires: nil)
        XCTAssertGreaterThan(b.handle, a.handle)
        XCTAssertEqual(try value(model), .uint32(20))
        // The bottom one ends: nothing anyone sees changes.
        XCTAssertEqual(try model.releaseOverride(a.handle), [])
        XCTAssertEqual(try value(model), .uint32(20))
        let c = try model.override("display.idleDelay", with: .uint32(30), holder: first, now: 3, expires: nil)
        XCTAssertEqual(valueChanges(try model.releaseOverride(c.handle)), [.uint32(30)])
        XCTAssertEqual(try value(model), .uint32(20), "the one below shows again")
        XCTAssertEqual(valueChanges(try model.releaseOverride(b.handle)), [.uint32(20)])
        XCTAssertEqual(try value(model), .uint32(600))
        XCTAssertNil(model.entry(for: try Key("display.idleDelay"))?.layers, "no layers left: the entry is plain again")
        XCTAssertThrowsError(try model.releaseOverride(b.handle)) { XCTAssertEqual(($0 as? PropBusError)?.code, .unknownKey) }
    }

    func testAUserSetDuringAnOverrideChangesNothingSeenAndShowsWhenItEnds() throws {
        let model = try model()
        let held = try model.override("display.idleDelay", with: .uint32(0), holder: first, now: 1, expires: nil)
        XCTAssertEqual(try model.set("display.idleDelay", to: .uint32(900)), [], "the effective value did not change")
        // The user's value equal to the override's is still a write of the user's value.
        XCTAssertEqual(model.entry(for: try Key("display.idleDelay"))?.storedValue, .uint32(900))
        XCTAssertEqual(try model.set("display.idleDelay", to: .uint32(0)), [])
        XCTAssertEqual(model.entry(for: try Key("display.idleDelay"))?.storedValue, .uint32(0))
        _ = try model.set("display.idleDelay", to: .uint32(900))
        XCTAssertEqual(valueChanges(try model.releaseOverride(held.handle)), [.uint32(0)])
        XCTAssertEqual(try value(model), .uint32(900))
    }

    func testAnOverrideIsCheckedAsASetAndChargedToItsHoldersQuota() throws {
        let model = try model(quotas: Quotas(limits: [.overrides: 2]))
        _ = try model.create(key: "display.level", type: "i", defaultValue: .int32(5), options: ["maximum": .int32(9)])
        XCTAssertThrowsError(try model.override("display.level", with: .int32(10), holder: first, now: 1, expires: nil)) {
            XCTAssertEqual(($0 as? PropBusError)?.code, .outOfRange)
        }
        XCTAssertThrowsError(try model.override("display.level", with: .string("x"), holder: first, now: 1, expires: nil)) {
            XCTAssertEqual(($0 as? PropBusError)?.code, .invalidArgs)
        }
        let one = try model.override("display.level", with: .int32(1), holder: first, now: 1, expires: nil)
        _ = try model.override("display.level", with: .int32(2), holder: second, now: 1, expires: nil)
        XCTAssertThrowsError(try model.override("display.level", with: .int32(3), holder: first, now: 1, expires: nil)) { error in
            XCTAssertEqual((error as? PropBusError)?.code, .limitsExceeded)
            XCTAssertTrue((error as? PropBusError)?.message.contains("--quota overrides=2") == true, "\(error)")
        }
        _ = try model.override("display.level", with: .int32(3), holder: LeaseHolder(busName: ":1.9", userID: 0), now: 1, expires: nil)
        _ = try model.releaseOverride(one.handle)
        _ = try model.override("display.level", with: .int32(4), holder: first, now: 1, expires: nil)
    }

    func testTTLOverridesEndWhenDueAndConnectionOnesWithTheirHolder() throws {
        let model = try model()
        let timed = try model.override("display.idleDelay", with: .uint32(5), holder: first, now: 100, expires: 200)
        _ = try model.override("display.idleDelay", with: .uint32(7), holder: first, now: 110, expires: nil)
        XCTAssertEqual(model.leases.nextExpiry, 200)
        XCTAssertEqual(model.endExpiredLeases(now: 199), [])
        // Its holder leaving ends only what it holds without a TTL.
        XCTAssertEqual(valueChanges(model.endLeases(heldBy: ":1.5")), [.uint32(7)])
        XCTAssertEqual(try value(model), .uint32(5))
        XCTAssertEqual(valueChanges(model.endExpiredLeases(now: 200)), [.uint32(5)])
        XCTAssertEqual(try value(model), .uint32(600))
        XCTAssertNil(model.leases.nextExpiry)
        XCTAssertNil(model.override(timed.handle))
    }

    func testEachEndIsAChangeOfItsOwnWithItsOrigin() throws {
        let model = try model()
        model.origin = .call(WriteSet.Caller(via: "Override", busName: ":1.5"))
        _ = try model.override("display.idleDelay", with: .uint32(0), holder: first, now: 1, expires: nil)
        model.origin = .daemon
        _ = model.endLeases(heldBy: ":1.5")
        let changes = model.takeWriteSet().changes
        XCTAssertEqual(changes.map(\.origin.via), ["Override", "override 1 ended: its holder :1.5 left the bus"])
        XCTAssertEqual(changes.map { $0.entries.first?.after?.value }, [.uint32(0), .uint32(600)])
        XCTAssertEqual(changes.map { $0.entries.first?.after?.storedValue }, [.uint32(600), .uint32(600)], "the user's value is never written")
    }

    func testARolledBackRoundTakesItsOverridesBack() throws {
        let model = try model()
        let held = try model.override("display.idleDelay", with: .uint32(0), holder: first, now: 1, expires: 50)
        model.rollbackRound()
        XCTAssertEqual(try value(model), .uint32(600))
        XCTAssertNil(model.override(held.handle))
        XCTAssertNil(model.leases.nextExpiry)
    }

    func testAnEphemeralKeyGoesWithItsCreatorAndItsOverridesWithIt() throws {
        let model = try model()
        _ = try model.create(key: "eph.k", type: "i", defaultValue: .int32(1))
        model.addLifetime(to: try Key("eph.k"), holder: first, now: 1, expires: nil)
        _ = try model.override("eph.k", with: .int32(2), holder: second, now: 1, expires: 99)
        let changes = model.endLeases(heldBy: ":1.5")
        XCTAssertTrue(changes.contains(.deleted(try Key("eph.k"), old: .int32(2))), "\(changes)")
        XCTAssertNil(model.entry(for: try Key("eph.k")))
        XCTAssertTrue(model.leases.isEmpty, "its override went with it")
        XCTAssertNil(model.leases.nextExpiry)
    }

    func testStoredLeasesComeBackAndHandlesNeverRepeat() throws {
        var state = StoredState()
        let key = try Key("display.idleDelay")
        state.definitions = [PropertyDefinition(key: key, type: .uint32, defaultValue: .uint32(300))]
        state.values = [key: (.uint32(600), 1)]
        state.leases = [Lease(handle: 7, key: key, subject: .override(.uint32(0)), holder: first, since: 1, expires: 500),
                        Lease(handle: 8, key: try Key("gone.key"), subject: .override(.uint32(0)), holder: first, since: 1, expires: 500)]
        state.nextLeaseHandle = 9
        let model = PropertyModel(store: MemoryStore(), loaded: state)
        model.adoptLoadedLeases()
        XCTAssertEqual(try value(model), .uint32(0))
        XCTAssertEqual(model.leases.overrideKeys, [7: key], "a lease of a key that is gone is forgotten")
        let next = try model.override("display.idleDelay", with: .uint32(1), holder: first, now: 2, expires: nil)
        XCTAssertEqual(next.handle, 9)
    }
}
