import DBusValues
import Foundation
import PropBus
import XCTest

/// A binding acts with its principal's rights at every propagation, groups resolved at each
/// check: on the core model with a fixed account table, without a bus.
final class BindingRightsTests: XCTestCase {
    /// The groups of uid 1000, changed by the tests as an administrator would (gpasswd -d).
    private final class Membership: @unchecked Sendable {
        // Only touched on the test's thread, by the test and by the checks it causes.
        var groups: [UInt32] = [29]
    }

    private let membership = Membership()
    private var model: PropertyModel!
    private var events: [(UInt64, String?)] = []

    override func setUp() {
        model = try! PropertyModel(store: MemoryStore())
        let membership = membership
        let accounts = Accounts.table(users: [:], groups: ["audio": 29])
        var policy = AccessPolicy(daemonUserID: 999, writerGroup: nil, accounts: accounts)
        policy.accounts.groupsOfUser = { $0 == 1000 ? membership.groups : [] }
        model.bindingAuthority = BindingAuthority.enforcing(policy)
        model.bindingStateHandler = { [unowned self] binding, reason in events.append((binding.id, reason)) }
    }

    func testABindingStopsWritingWhenItsPrincipalLeavesTheWritersGroupAndResumesWhenBack() throws {
        let audio: [String: DBusValue] = ["writers": .array(of: .string, [.string("@audio")])]
        _ = try model.create(key: "out.x", type: "i", defaultValue: .int32(0), options: audio)
        _ = try model.create(key: "in.y", type: "i", defaultValue: .int32(0))
        let binding = try model.bind(key: "out.x", to: "in.y", options: ["direction": .string("from")], owner: ":1.1", principal: 1000).binding
        _ = try model.set("in.y", to: .int32(1))
        XCTAssertEqual(try model.value(of: "out.x"), .int32(1))

        membership.groups = []
        _ = try model.set("in.y", to: .int32(2))
        XCTAssertEqual(try model.value(of: "out.x"), .int32(1), "uid 1000 wrote out.x after leaving @audio")
        let reason = try XCTUnwrap(model.bindings.suspension(of: binding.id))
        XCTAssertTrue(reason.contains("uid 1000 may not write out.x"), reason)
        XCTAssertEqual(events.map(\.0), [binding.id])

        membership.groups = [29]
        _ = try model.set("in.y", to: .int32(3))
        XCTAssertEqual(try model.value(of: "out.x"), .int32(3))
        XCTAssertNil(model.bindings.suspension(of: binding.id))
        XCTAssertEqual(events.count, 2)
        XCTAssertNil(events.last?.1, "the resumption is told")
    }

    func testARolledBackRoundTakesItsVerdictsBack() throws {
        _ = try model.create(key: "out.x", type: "i", defaultValue: .int32(0), options: ["writers": .array(of: .string, [.string("@audio")])])
        _ = try model.create(key: "in.y", type: "i", defaultValue: .int32(0))
        let binding = try model.bind(key: "out.x", to: "in.y", options: ["direction": .string("from")], owner: ":1.1", principal: 1000).binding
        model.commitRound()
        membership.groups = []
        _ = try model.set("in.y", to: .int32(2))
        XCTAssertNotNil(model.bindings.suspension(of: binding.id))
        model.rollbackRound()
        XCTAssertNil(model.bindings.suspension(of: binding.id), "the verdict of a round that never happened stayed")
        XCTAssertNotNil(model.bindings[binding.id])
    }

    func testTheDaemonsOwnBindingsAndRootsAreNotChecked() throws {
        _ = try model.create(key: "vault.pin", type: "i", defaultValue: .int32(4242), options: ["secret": .boolean(true)])
        _ = try model.create(key: "out.x", type: "i", defaultValue: .int32(0), options: ["writers": .array(of: .string, [.string("65534")])])
        let own = try model.bind(key: "out.x", to: "vault.pin", options: ["direction": .string("from")], owner: nil).binding
        XCTAssertNil(model.denial(of: own))
        var roots = own
        roots.principal = 0
        XCTAssertNil(model.denial(of: roots))
        var nobodys = own
        nobodys.principal = 65534
        let reason = try XCTUnwrap(model.denial(of: nobodys))
        XCTAssertTrue(reason.contains("uid 65534 may not read vault.pin"), reason)
        XCTAssertFalse(reason.contains("4242"), reason)
    }
}
