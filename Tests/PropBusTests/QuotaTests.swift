import DBusValues
import XCTest

@testable import PropBus

/// Per-uid quotas on the core: the pure decisions (``Quotas``), the ledger the tables
/// keep (``UsageLedger``), and each table charging the principal of each act.
final class QuotaTests: XCTestCase {
    private static let nobody: UInt32 = 65534
    private var store: FailingStore!
    private var model: PropertyModel!
    private var table: CommandTable!

    override func setUpWithError() throws {
        store = FailingStore()
        model = try PropertyModel(store: store, limits: .init(maximumValueSize: 4096))
        table = CommandTable(model: model, maximumRunning: 8)
    }

    private func enforce(_ overrides: [Quota: UInt64]) {
        let quotas = Quotas.enforcing(daemonUserID: 998, overrides: overrides)
        model.quotas = quotas
        table.quotas = quotas
    }

    private func assertLimitsExceeded(_ message: String, _ body: () throws -> Void, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try body(), file: file, line: line) { error in
            guard let error = error as? PropBusError else { return XCTFail("\(error)", file: file, line: line) }
            XCTAssertEqual(error.code, .limitsExceeded, file: file, line: line)
            XCTAssertEqual(error.message, message, file: file, line: line)
        }
    }

    // MARK: Decisions and the ledger

    func testChecksNameTheQuotaAndTheUidAndSpareRootAndTheDaemonsUser() throws {
        let quotas = Quotas.enforcing(daemonUserID: 998, overrides: [.bindings: 2])
        XCTAssertNoThrow(try quotas.check(.bindings, uid: 65534, using: 1, "cannot bind a to b"))
        assertLimitsExceeded("cannot bind a to b: uid 65534 already holds 2 bindings, its quota (--quota bindings=2)") {
            try quotas.check(.bindings, uid: 65534, using: 2, "cannot bind a to b")
        }
        assertLimitsExceeded("cannot write a.b: uid 1000 would hold 16777217 bytes of stored values, more than its quota (--quota stored-bytes=16777216)") {
            try quotas.check(.storedBytes, uid: 1000, using: 16 << 20, adding: 1, "cannot write a.b")
        }
        for exempt: UInt32? in [0, 998, nil] {
            XCTAssertNoThrow(try quotas.check(.bindings, uid: exempt, using: 1_000_000, "x"))
            XCTAssertNil(quotas.limit(.bindings, for: exempt))
        }
        XCTAssertNoThrow(try Quotas.off.check(.bindings, uid: 65534, using: 1_000_000, "x"))
        XCTAssertEqual(quotas.limit(.executions, for: 65534), 16, "the default")
    }

    func testQuotaOptionParses() throws {
        XCTAssertEqual(try Quotas.parse("input-bytes=100").get().1, 100)
        XCTAssertEqual(try Quotas.parse("bindings=0").get().0, .bindings)
        for bad in ["bindings", "bindings=-1", "nope=3", "=3", "bindings=x"] {
            XCTAssertThrowsError(try Quotas.parse(bad).get(), bad)
        }
    }

    func testLedgerChargesReleasesAndMerges() {
        var ledger = UsageLedger()
        ledger.charge(.bindings, to: 7)
        ledger.charge(.bindings, to: 7)
        ledger.charge(.storedBytes, to: 7, 100)
        ledger.charge(.bindings, to: nil)
        ledger.release(.bindings, from: 7)
        ledger.release(.storedBytes, from: 7, 500)
        XCTAssertEqual(ledger.usage(of: 7), [.bindings: 1], "never below zero, and nothing for the daemon's own")
        var other = UsageLedger()
        other.charge(.bindings, to: 7, 2)
        other.charge(.commands, to: 8)
        let merged = ledger.merging(other)
        XCTAssertEqual(merged.used(.bindings, by: 7), 3)
        XCTAssertEqual(merged.principals, [7, 8])
        ledger.release(.bindings, from: 7)
        XCTAssertEqual(ledger.principals, [], "a uid that holds nothing is forgotten")
    }

    func testTheLastExecutionSlotsAreKeptForExemptCallers() {
        XCTAssertEqual(Quotas.reservedExecutions(of: 64), 8)
        XCTAssertEqual(Quotas.reservedExecutions(of: 8), 1)
        XCTAssertEqual(Quotas.reservedExecutions(of: 1), 0, "a single slot is no one's reserve")
        let quotas = Quotas.enforcing(daemonUserID: 998)
        XCTAssertEqual([0, 998, 65534, nil].map(quotas.mayUseReserve), [true, true, false, false], "not a caller of unknown uid")
        XCTAssertTrue(Quotas.off.mayUseReserve(nil))
    }

    // MARK: Bindings

    func testBindingsAreCountedByPrincipalOverConnectionsAndAfterARollback() throws {
        enforce([.bindings: 2])
        _ = try model.create(key: "a.x", type: "i", defaultValue: .int32(0))
        _ = try model.create(key: "a.y", type: "i", defaultValue: .int32(0))
        model.commitRound()
        let persistent: [String: DBusValue] = ["persistent": .boolean(true), "direction": .string("from")]
        _ = try model.bind(key: "a.x", to: "a.y", options: persistent, owner: ":1.1", principal: Self.nobody)
        // The same persistent channel again is the same binding, and costs nothing.
        let again = try model.bind(key: "a.x", to: "a.y", options: persistent, owner: ":1.9", principal: Self.nobody)
        XCTAssertEqual(again.binding.id, model.bindings.all.first?.id)
        _ = try model.bind(key: "a.x", to: "a.y", options: ["to_key": .string("value + 1")], owner: ":1.2", principal: Self.nobody)
        assertLimitsExceeded("cannot bind a.x to a.y: uid 65534 already holds 2 bindings, its quota (--quota bindings=2)") {
            _ = try model.bind(key: "a.x", to: "a.y", options: ["to_key": .string("value + 2")], owner: ":1.3", principal: Self.nobody)
        }
        XCTAssertNoThrow(try model.bind(key: "a.x", to: "a.y", options: ["to_key": .string("value + 3")], owner: ":1.3", principal: 0), "root is exempt")
        XCTAssertEqual(model.bindings.count(principal: Self.nobody), 2)
        XCTAssertEqual(model.bindings.count(ownedBy: ":1.2"), 1)
        model.rollbackRound()
        XCTAssertEqual(model.bindings.count(principal: Self.nobody), 0)
        XCTAssertEqual(model.bindings.count(ownedBy: ":1.1"), 0)
        XCTAssertNil(model.bindings.persistentBinding(sameChannelAs: Binding(id: 0, key: try Key("a.x"), to: try Key("a.y"), direction: .from, persistent: true)))
    }

    // MARK: Properties and stored bytes

    func testPropertiesAreChargedToTheirCreatorAndTheCountComesBackWithTheDefinitions() throws {
        enforce([.properties: 2])
        _ = try model.create(key: "n.a", type: "i", defaultValue: .int32(0), creator: Self.nobody)
        _ = try model.create(key: "n.b", type: "i", defaultValue: .int32(0), creator: Self.nobody)
        assertLimitsExceeded("cannot create n.c: uid 65534 already holds 2 properties, its quota (--quota properties=2)") {
            _ = try model.create(key: "n.c", type: "i", defaultValue: .int32(0), creator: Self.nobody)
        }
        assertLimitsExceeded("cannot create n.c: uid 65534 already holds 2 properties, its quota (--quota properties=2)") {
            _ = try model.create(key: "n.c", type: "i", defaultValue: .int32(0), options: ["source": .string("/etc/x.json")], creator: Self.nobody)
        }
        // Created again, by anyone, a property keeps its creator and costs nothing more.
        _ = try model.create(key: "n.a", type: "i", defaultValue: .int32(1), creator: 0)
        XCTAssertEqual(model.entry(for: try Key("n.a"))?.definition.creator, Self.nobody)
        XCTAssertEqual(model.usage.used(.properties, by: Self.nobody), 2)
        _ = try model.delete(key: "n.b")
        XCTAssertEqual(model.usage.used(.properties, by: Self.nobody), 1)

        var state = StoredState()
        state.definitions = [try XCTUnwrap(model.entry(for: try Key("n.a"))).definition]
        let loaded = PropertyModel(store: FailingStore(), loaded: state)
        XCTAssertEqual(loaded.usage.used(.properties, by: Self.nobody), 1, "counted from the stored creator")
    }

    func testStoredBytesOfACreatorsKeysAreBoundedWhoeverWrites() throws {
        enforce([.storedBytes: 100])
        _ = try model.create(key: "n.s", type: "s", defaultValue: .string(""), creator: Self.nobody)
        _ = try model.set("n.s", to: .string(String(repeating: "x", count: 80)))
        XCTAssertEqual(model.usage.used(.storedBytes, by: Self.nobody), 85)
        // Replacing a value is charged by the difference.
        _ = try model.set("n.s", to: .string(String(repeating: "y", count: 90)))
        assertLimitsExceeded("cannot write n.s: uid 65534 would hold 105 bytes of stored values, more than its quota (--quota stored-bytes=100)") {
            _ = try model.set("n.s", to: .string(String(repeating: "z", count: 100)))
        }
        XCTAssertEqual(try model.value(of: "n.s"), .string(String(repeating: "y", count: 90)), "nothing changed")
        _ = try model.reset("n.s")
        XCTAssertEqual(model.usage.used(.storedBytes, by: Self.nobody), 0, "a default costs nothing")
        _ = try model.create(key: "r.s", type: "s", defaultValue: .string(""))
        XCTAssertNoThrow(try model.set("r.s", to: .string(String(repeating: "x", count: 1000))), "the daemon's own keys are not charged")
    }

    // MARK: Commands and executions

    private static let sleeper: [String: DBusValue] = ["exec": .array(of: .string, [.string("sleep"), .string("9")]), "concurrent": .boolean(true)]

    func testAnInputLargerThanAValueIsRefusedForEveryone() throws {
        _ = try table.create(key: "jobs.run", options: Self.sleeper)
        assertLimitsExceeded("cannot execute jobs.run: its input is 5005 bytes, more than the 4096-byte limit of a value (--max-value-size)") {
            _ = try table.accept("jobs.run", input: .string(String(repeating: "x", count: 5000)), principal: 0)
        }
        XCTAssertEqual(table.runningCount, 0)
    }

    func testExecutionsAndTheirInputAreChargedToTheCallerBelowTheReserve() throws {
        enforce([.executions: 3, .inputBytes: 3000])
        _ = try table.create(key: "jobs.run", options: Self.sleeper)
        let big = DBusValue.string(String(repeating: "x", count: 1500))
        _ = try table.accept("jobs.run", input: big, principal: Self.nobody)
        assertLimitsExceeded("cannot execute jobs.run: uid 65534 would hold 3010 bytes of command input, more than its quota (--quota input-bytes=3000)") {
            _ = try table.accept("jobs.run", input: big, principal: Self.nobody)
        }
        _ = try table.accept("jobs.run", input: .string(""), principal: Self.nobody)
        _ = try table.accept("jobs.run", input: .string(""), principal: Self.nobody)
        assertLimitsExceeded("cannot execute jobs.run: uid 65534 already holds 3 running executions, its quota (--quota executions=3)") {
            _ = try table.accept("jobs.run", input: .string(""), principal: Self.nobody)
        }
        // Others fill the rest but the last slot (of 8), which root still takes.
        for uid: UInt32 in [1000, 1001, 1002, 1003] { _ = try table.accept("jobs.run", input: .string(""), principal: uid) }
        XCTAssertThrowsError(try table.accept("jobs.run", input: .string(""), principal: 1004)) { error in
            XCTAssertTrue((error as? PropBusError)?.message.contains("kept for root") == true, "\(error)")
        }
        let (execution, _) = try table.accept("jobs.run", input: .string(""), principal: 0)
        XCTAssertEqual(table.usage.used(.executions, by: Self.nobody), 3)
        XCTAssertEqual(table.usage.used(.inputBytes, by: Self.nobody), 1505 + 5 + 5)
        _ = table.finish(execution.id, of: execution.command)
        XCTAssertEqual(table.usage.used(.executions, by: 0), 0)
    }

    func testCommandsAreChargedToTheirCreatorWhichTheStoreKeeps() throws {
        enforce([.commands: 1])
        _ = try table.create(key: "jobs.a", options: Self.sleeper, creator: Self.nobody)
        assertLimitsExceeded("cannot create command jobs.b: uid 65534 already holds 1 commands, its quota (--quota commands=1)") {
            _ = try table.create(key: "jobs.b", options: Self.sleeper, creator: Self.nobody)
        }
        let stored = try XCTUnwrap(table.definition(of: try Key("jobs.a"))).storedOptions
        XCTAssertEqual(stored["creator"], .uint32(Self.nobody))
        XCTAssertNil(table.definition(of: try Key("jobs.a"))?.options["creator"], "ListCommands does not show it")
        _ = try table.delete(key: "jobs.a")
        let again = CommandTable(model: model)
        XCTAssertEqual(again.recreate([(try Key("jobs.a"), stored)]).count, 0)
        XCTAssertEqual(again.usage.used(.commands, by: Self.nobody), 1, "counted from the stored creator")
    }
}
