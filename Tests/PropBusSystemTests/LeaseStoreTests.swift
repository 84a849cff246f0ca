import DBusValues
import Foundation
import XCTest

@testable import PropBus
@testable import PropBusSystem

/// TTL overrides and ephemeral keys in the `leases` table (schema version 6): kept across a
/// reopen with their holder, while a connection's override is never written.
final class LeaseStoreTests: XCTestCase {
    private var directory: URL!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("propbus-leases-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: directory)
    }

    private var path: String { directory.appendingPathComponent(SQLiteStore.fileName).path }
    private let holder = LeaseHolder(busName: ":1.5", userID: 1000, processID: 42, command: "mpv")

    func testTTLOverridesAndEphemeralKeysSurviveAReopenAndConnectionOverridesDoNot() throws {
        let timed: UInt64
        do {
            let store = try SQLiteStore(path: path)
            let model = try PropertyModel(store: store)
            _ = try model.create(key: "display.idleDelay", type: "u", defaultValue: .uint32(300))
            _ = try model.create(key: "eph.k", type: "i", defaultValue: .int32(1))
            model.addLifetime(to: try Key("eph.k"), holder: holder, now: 5, expires: nil)
            timed = try model.override("display.idleDelay", with: .uint32(0), holder: holder, now: 10, expires: 99).handle
            _ = try model.override("display.idleDelay", with: .uint32(7), holder: holder, now: 11, expires: nil)
            try model.commit(to: store)
            model.commitRound()
        }
        let store = try SQLiteStore(path: path)
        let state = try store.load()
        XCTAssertEqual(state.nextLeaseHandle, timed + 2, "the counter, so handles never repeat")
        XCTAssertEqual(state.leases.map(\.handle), [timed - 1, timed])
        XCTAssertEqual(state.leases.last, Lease(handle: timed, key: try Key("display.idleDelay"), subject: .override(.uint32(0)),
                                                holder: holder, since: 10, expires: 99))
        XCTAssertEqual(state.leases.first?.subject, .key)
        let model = PropertyModel(store: store, loaded: state)
        model.adoptLoadedLeases()
        XCTAssertEqual(try model.value(of: "display.idleDelay"), .uint32(0), "the TTL override holds again; the other one ended")
        // A key of its creator's connection goes at start-up: that connection was to the daemon before.
        let changes = model.endLeasesOfPreviousRun()
        XCTAssertTrue(changes.contains(.deleted(try Key("eph.k"), old: .int32(1))), "\(changes)")
        XCTAssertEqual(model.endExpiredLeases(now: 100).count, 1)
        try model.commit(to: store)
        XCTAssertEqual(try SQLiteStore(path: path).load().leases, [], "ended leases leave the store")
    }
}
