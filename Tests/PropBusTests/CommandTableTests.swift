import DBusValues
import XCTest

@testable import PropBus

/// The command rules (docs/commands.md) on the core (`CommandTable` over a `PropertyModel`), without a bus.
final class CommandTableTests: XCTestCase {
    private var store: FailingStore!
    private var model: PropertyModel!
    private var table: CommandTable!

    override func setUpWithError() throws {
        store = FailingStore()
        model = try PropertyModel(store: store)
        table = CommandTable(model: model)
    }

    // MARK: Helpers

    private func key(_ text: String) -> Key { try! Key(text) }

    private func value(_ key: String) throws -> DBusValue { try model.value(of: key) }

    private func enabled(_ command: String) throws -> Bool? { try value(command + ".Enabled").boolValue }
    private func executing(_ command: String) throws -> Bool? { try value(command + ".Executing").boolValue }
    private func executions(_ command: String) throws -> DBusValue { try value(command + ".Executions") }

    private static let echo: [String: DBusValue] = ["exec": .array(of: .string, [.string("echo"), .string("hi")])]

    private func options(_ extra: [String: DBusValue] = [:]) -> [String: DBusValue] {
        Self.echo.merging(extra) { $1 }
    }

    /// A string property the view model types into, transient like a search field.
    private func createText(_ text: String = "") throws {
        _ = try model.create(key: "vm.text", type: "s", defaultValue: .string(text), options: ["persistent": .boolean(false)])
    }

    /// What the service does after a write: publish the model's changes, then the state they change.
    private func set(_ key: String, _ value: DBusValue) throws -> [PropertyChange] {
        let changes = try model.set(key, to: value)
        return changes + table.refresh(after: changes)
    }

    /// The `.valueChanged` keys among `changes`.
    private func changedKeys(_ changes: [PropertyChange]) -> [String] {
        changes.compactMap { if case .valueChanged(let key, _) = $0 { key.text } else { nil } }
    }

    /// Ends the round as the service does, through ``Round``; whether it committed.
    private func endRound() -> Bool {
        guard Round(model: model, commands: table, store: store).end() != nil else { return true }
        _ = table.reassertState()
        return false
    }

    private func assertThrows<T>(_ code: PropBusError.Code, containing pieces: [String] = [], _ body: @autoclosure () throws -> T,
                                 file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try body(), file: file, line: line) { error in
            guard let error = error as? PropBusError else { return XCTFail("not a PropBusError: \(error)", file: file, line: line) }
            XCTAssertEqual(error.code, code, error.message, file: file, line: line)
            for piece in pieces {
                XCTAssertTrue(error.message.contains(piece), "'\(error.message)' lacks '\(piece)'", file: file, line: line)
            }
        }
    }

    // MARK: 1. Enabled follows the predicate

    func testEnabledFollowsThePredicateAndIsSignalledOnlyWhenItFlips() throws {
        try createText("ab")
        let created = try table.create(key: "vm.search", options: options(["enabled_when": .string("length(vm.text) > 3")]))
        XCTAssertEqual(Set(created.compactMap { if case .created(let key) = $0 { key.text } else { nil } }),
                       ["vm.search.Enabled", "vm.search.Executing", "vm.search.Executions"])
        XCTAssertEqual(try enabled("vm.search"), false, "\"ab\" is too short")
        XCTAssertEqual(table.state(of: key("vm.search"))?.enabled, false)

        let toLong = try set("vm.text", .string("abcd"))
        XCTAssertEqual(changedKeys(toLong), ["vm.text", "vm.search.Enabled"])
        XCTAssertEqual(try enabled("vm.search"), true)
        XCTAssertEqual(table.state(of: key("vm.search"))?.enabled, true)
        XCTAssertTrue(toLong.contains(.valueChanged(key("vm.search.Enabled"), old: .boolean(false))))

        let stillLong = try set("vm.text", .string("abcde"))
        XCTAssertEqual(changedKeys(stillLong), ["vm.text"], "no flip, no signal")
        XCTAssertEqual(try enabled("vm.search"), true)

        let toShort = try set("vm.text", .string("abc"))
        XCTAssertEqual(changedKeys(toShort), ["vm.text", "vm.search.Enabled"])
        XCTAssertTrue(toShort.contains(.valueChanged(key("vm.search.Enabled"), old: .boolean(true))))
        XCTAssertEqual(try enabled("vm.search"), false)

        XCTAssertEqual(changedKeys(try set("vm.text", .string("xy"))), ["vm.text"], "still disabled: no signal")
    }

    func testEnabledIsTrueFromCreationWhenThePredicateHolds() throws {
        try createText("abcdef")
        _ = try table.create(key: "vm.search", options: options(["enabled_when": .string("length(vm.text) > 3")]))
        XCTAssertEqual(try enabled("vm.search"), true)
        XCTAssertEqual(try executing("vm.search"), false)
        XCTAssertEqual(try executions("vm.search"), .uint32(0))
        XCTAssertEqual(table.state(of: key("vm.search")), CommandTable.State(enabled: true, executing: false, executions: 0))

        _ = try table.create(key: "vm.always", options: options())
        XCTAssertEqual(try enabled("vm.always"), true, "no predicate: enabled")
    }

    func testRefreshIgnoresChangesToKeysThePredicateDoesNotRead() throws {
        try createText("ab")
        _ = try model.create(key: "vm.other", type: "i", defaultValue: .int32(0))
        _ = try table.create(key: "vm.search", options: options(["enabled_when": .string("length(vm.text) > 3")]))
        XCTAssertEqual(changedKeys(try set("vm.other", .int32(5))), ["vm.other"])
        XCTAssertEqual(try enabled("vm.search"), false)
    }

    func testResetOfAPredicateKeyRecomputesEnabled() throws {
        try createText("abcdef")
        _ = try table.create(key: "vm.search", options: options(["enabled_when": .string("length(vm.text) > 3")]))
        _ = try set("vm.text", .string("x"))
        XCTAssertEqual(try enabled("vm.search"), false)
        let changes = try model.reset("vm.text")
        XCTAssertEqual(changedKeys(changes + table.refresh(after: changes)), ["vm.text", "vm.search.Enabled"])
        XCTAssertEqual(try enabled("vm.search"), true, "the default \"abcdef\" is long enough")
    }

    func testDeletingAKeyThePredicateReadsDisablesTheCommand() throws {
        try createText("abcdef")
        _ = try table.create(key: "vm.search", options: options(["enabled_when": .string("length(vm.text) > 3")]))
        XCTAssertEqual(try enabled("vm.search"), true)
        let changes = try model.delete(key: "vm.text")
        XCTAssertEqual(changedKeys(table.refresh(after: changes)), ["vm.search.Enabled"])
        XCTAssertEqual(try enabled("vm.search"), false, "a predicate that cannot be evaluated does not hold")
        assertThrows(.notEnabled, containing: ["command vm.search is not enabled", "enabled_when"],
                     try table.accept("vm.search", input: .string("")))
    }

    func testPredicateOverAnotherCommandsStateChains() throws {
        _ = try table.create(key: "vm.load", options: options())
        _ = try table.create(key: "vm.save", options: options(["enabled_when": .string("!vm.load.Executing")]))
        XCTAssertEqual(try enabled("vm.save"), true)
        let accepted = try table.accept("vm.load", input: .string(""))
        let changes = accepted.changes + table.refresh(after: accepted.changes)
        XCTAssertTrue(changedKeys(changes).contains("vm.save.Enabled"), "\(changes)")
        XCTAssertEqual(try enabled("vm.save"), false)
        let finished = table.finish(accepted.execution.id, of: key("vm.load"))
        _ = table.refresh(after: finished)
        XCTAssertEqual(try enabled("vm.save"), true)
    }

    func testAPredicateOverItsOwnEnabledCannotLoopForever() throws {
        _ = try table.create(key: "vm.blink", options: options())
        // Only a redefinition can read its own state (the keys exist by then).
        let changes = try table.create(key: "vm.blink", options: options(["enabled_when": .string("!vm.blink.Enabled")]))
        let all = changes + table.refresh(after: changes)
        XCTAssertLessThanOrEqual(all.count, 40, "refresh is bounded")
        XCTAssertEqual(try enabled("vm.blink"), table.state(of: key("vm.blink"))?.enabled, "the key and the table agree")
    }

    // MARK: 2. Executions

    func testSerialCommandIsDisabledWhileItRuns() throws {
        _ = try table.create(key: "vm.search", options: options())
        let (execution, changes) = try table.accept("vm.search", input: .string("cats"))
        XCTAssertEqual(execution.command, key("vm.search"))
        XCTAssertEqual(execution.input, .string("cats"))
        XCTAssertEqual(Set(changedKeys(changes)), ["vm.search.Enabled", "vm.search.Executing", "vm.search.Executions"])
        XCTAssertEqual(try executing("vm.search"), true)
        XCTAssertEqual(try executions("vm.search"), .uint32(1))
        XCTAssertEqual(try enabled("vm.search"), false)
        XCTAssertEqual(table.running(of: key("vm.search")), [execution])
        XCTAssertEqual(table.execution(execution.id, of: key("vm.search")), execution)

        assertThrows(.notEnabled, containing: ["command vm.search is not enabled", "concurrent"],
                     try table.accept("vm.search", input: .string("dogs")))
        XCTAssertEqual(try executions("vm.search"), .uint32(1), "a refused execution changes nothing")
        XCTAssertEqual(table.runningCount, 1)

        let finished = table.finish(execution.id, of: key("vm.search"))
        XCTAssertEqual(Set(changedKeys(finished)), ["vm.search.Enabled", "vm.search.Executing", "vm.search.Executions"])
        XCTAssertEqual(try executing("vm.search"), false)
        XCTAssertEqual(try executions("vm.search"), .uint32(0))
        XCTAssertEqual(try enabled("vm.search"), true)
        XCTAssertEqual(table.finish(execution.id, of: key("vm.search")), [], "finishing twice changes nothing")

        let again = try table.accept("vm.search", input: .string("dogs"))
        XCTAssertGreaterThan(again.execution.id, execution.id, "ids are not reused")
    }

    func testConcurrentCommandStaysExecutingUntilAllExecutionsEnd() throws {
        _ = try table.create(key: "vm.fetch", options: options(["concurrent": .boolean(true)]))
        let first = try table.accept("vm.fetch", input: .string("1")).execution
        let second = try table.accept("vm.fetch", input: .string("2")).execution
        XCTAssertEqual(try enabled("vm.fetch"), true, "concurrent: still enabled")
        XCTAssertEqual(try executing("vm.fetch"), true)
        XCTAssertEqual(try executions("vm.fetch"), .uint32(2))
        XCTAssertEqual(table.running(of: key("vm.fetch")).map(\.id), [first.id, second.id])

        let afterFirst = table.finish(first.id, of: key("vm.fetch"))
        XCTAssertEqual(changedKeys(afterFirst), ["vm.fetch.Executions"], "Executing stays true: no change")
        XCTAssertEqual(try executing("vm.fetch"), true)
        XCTAssertEqual(try executions("vm.fetch"), .uint32(1))

        _ = table.finish(second.id, of: key("vm.fetch"))
        XCTAssertEqual(try executing("vm.fetch"), false)
        XCTAssertEqual(try executions("vm.fetch"), .uint32(0))
        XCTAssertEqual(table.state(of: key("vm.fetch")), CommandTable.State(enabled: true, executing: false, executions: 0))
    }

    func testDisabledByPredicateNamesTheReason() throws {
        try createText("ab")
        _ = try table.create(key: "vm.search", options: options(["enabled_when": .string("length(vm.text) > 3")]))
        assertThrows(.notEnabled, containing: ["command vm.search is not enabled", "length(vm.text) > 3"],
                     try table.accept("vm.search", input: .string("")))
        XCTAssertEqual(table.runningCount, 0)
    }

    func testUnknownCommand() throws {
        assertThrows(.unknownKey, containing: ["vm.nothing"], try table.accept("vm.nothing", input: .string("")))
        assertThrows(.invalidKey, try table.accept("vm-bad.x", input: .string("")))
        XCTAssertNil(table.state(of: key("vm.nothing")))
    }

    // MARK: 3. Limits and handlers

    func testMaximumRunningIsLimitsExceeded() throws {
        table = CommandTable(model: model, maximumRunning: 2)
        _ = try table.create(key: "vm.a", options: options(["concurrent": .boolean(true)]))
        _ = try table.create(key: "vm.b", options: options())
        let first = try table.accept("vm.a", input: .string("")).execution
        _ = try table.accept("vm.b", input: .string(""))
        assertThrows(.limitsExceeded, containing: ["vm.a", "2"], try table.accept("vm.a", input: .string("")))
        XCTAssertEqual(try executions("vm.a"), .uint32(1), "a refused execution changes nothing")
        XCTAssertEqual(table.runningCount, 2)
        _ = table.finish(first.id, of: key("vm.a"))
        XCTAssertNoThrow(try table.accept("vm.a", input: .string("")))
    }

    func testHandlerCommandIsEnabledOnlyWithARegisteredHandler() throws {
        _ = try table.create(key: "vm.search", options: ["handler": .boolean(true)])
        XCTAssertEqual(try enabled("vm.search"), false)
        assertThrows(.notEnabled, containing: ["command vm.search is not enabled", "handler"],
                     try table.accept("vm.search", input: .string("")))

        let registered = try table.registerHandler("vm.search", owner: ":1.7")
        XCTAssertEqual(changedKeys(registered), ["vm.search.Enabled"])
        XCTAssertEqual(try enabled("vm.search"), true)
        XCTAssertEqual(table.handler(of: key("vm.search")), ":1.7")
        XCTAssertNoThrow(try table.registerHandler("vm.search", owner: ":1.7"), "the same owner again is fine")
        assertThrows(.exists, containing: ["vm.search", ":1.7"], try table.registerHandler("vm.search", owner: ":1.8"))
        XCTAssertEqual(table.handler(of: key("vm.search")), ":1.7")
    }

    func testHandlerLeavingReturnsItsRunningExecutionsAndDisables() throws {
        _ = try table.create(key: "vm.search", options: ["handler": .boolean(true), "concurrent": .boolean(true)])
        _ = try table.create(key: "vm.other", options: ["handler": .boolean(true)])
        _ = try table.registerHandler("vm.search", owner: ":1.7")
        _ = try table.registerHandler("vm.other", owner: ":1.9")
        let first = try table.accept("vm.search", input: .string("1")).execution
        let second = try table.accept("vm.search", input: .string("2")).execution
        let kept = try table.accept("vm.other", input: .string("3")).execution

        let (ended, changes) = table.handlerLeft(":1.7")
        XCTAssertEqual(ended, [first, second])
        XCTAssertEqual(Set(changedKeys(changes)), ["vm.search.Enabled", "vm.search.Executing", "vm.search.Executions"])
        XCTAssertEqual(try enabled("vm.search"), false)
        XCTAssertEqual(try executing("vm.search"), false)
        XCTAssertEqual(try executions("vm.search"), .uint32(0))
        XCTAssertNil(table.handler(of: key("vm.search")))
        XCTAssertEqual(table.running(of: key("vm.other")), [kept], "another handler's executions go on")
        XCTAssertEqual(table.handlerLeft(":1.7").ended, [], "leaving twice ends nothing")

        // A new handler makes it usable again.
        _ = try table.registerHandler("vm.search", owner: ":1.10")
        XCTAssertEqual(try enabled("vm.search"), true)
    }

    func testUnregisterHandler() throws {
        _ = try table.create(key: "vm.search", options: ["handler": .boolean(true)])
        _ = try table.registerHandler("vm.search", owner: ":1.7")
        let running = try table.accept("vm.search", input: .string("")).execution
        assertThrows(.invalidArgs, try table.unregisterHandler("vm.search", owner: ":1.8"))
        let (ended, _) = try table.unregisterHandler("vm.search", owner: ":1.7")
        XCTAssertEqual(ended, [running])
        XCTAssertEqual(try enabled("vm.search"), false)
    }

    func testExecCommandTakesNoHandler() throws {
        _ = try table.create(key: "vm.search", options: options())
        assertThrows(.invalidArgs, containing: ["vm.search"], try table.registerHandler("vm.search", owner: ":1.7"))
    }

    // MARK: 4. Option errors

    func testOptionErrorsNameTheCommandAndTheOption() throws {
        try createText()
        let argv = DBusValue.array(of: .string, [.string("true")])
        let cases: [(options: [String: DBusValue], code: PropBusError.Code, pieces: [String])] = [
            (["exec": argv, "colour": .string("red")], .invalidArgs, ["colour", "vm.search", "exec, handler"]),
            (["exec": .string("echo hi")], .invalidArgs, ["exec", "vm.search", "as"]),
            (["exec": .array(of: .string, [])], .invalidArgs, ["exec", "vm.search", "empty"]),
            (["exec": .array(of: .string, [.string("")])], .invalidArgs, ["exec", "vm.search"]),
            (["exec": argv, "handler": .boolean(true)], .invalidArgs, ["vm.search", "both"]),
            ([:], .invalidArgs, ["vm.search", "exec", "handler"]),
            (["handler": .boolean(false)], .invalidArgs, ["vm.search", "exec", "handler"]),
            (["handler": .string("yes")], .invalidArgs, ["handler", "vm.search", "(b)"]),
            (["exec": argv, "enabled_when": .string("length(vm.text)")], .invalidExpression, ["enabled_when", "vm.search", "boolean"]),
            (["exec": argv, "enabled_when": .string("length(vm.nothing) > 3")], .unknownKey, ["enabled_when", "vm.search", "vm.nothing"]),
            (["exec": argv, "enabled_when": .string("length(")], .invalidExpression, ["enabled_when", "vm.search"]),
            (["exec": argv, "enabled_when": .boolean(true)], .invalidArgs, ["enabled_when", "vm.search", "(s)"]),
            (["exec": argv, "timeout": .double(0)], .invalidArgs, ["timeout", "vm.search", "positive"]),
            (["exec": argv, "timeout": .double(-1)], .invalidArgs, ["timeout", "vm.search"]),
            (["exec": argv, "timeout": .double(.infinity)], .invalidArgs, ["timeout", "vm.search"]),
            (["exec": argv, "timeout": .double(.nan)], .invalidArgs, ["timeout", "vm.search"]),
            (["exec": argv, "timeout": .string("5")], .invalidArgs, ["timeout", "vm.search", "(d)"]),
            (["exec": argv, "concurrent": .int32(1)], .invalidArgs, ["concurrent", "vm.search"]),
            (["exec": argv, "persistent": .string("no")], .invalidArgs, ["persistent", "vm.search"]),
            (["exec": argv, "description": .int32(1)], .invalidArgs, ["description", "vm.search"]),
            (["exec": argv, "writers": .string("root")], .invalidArgs, ["writers", "vm.search"]),
        ]
        for (options, code, pieces) in cases {
            assertThrows(code, containing: pieces, try table.create(key: "vm.search", options: options))
            XCTAssertNil(table.definition(of: key("vm.search")), "\(options): nothing created")
            XCTAssertNil(model.entry(for: key("vm.search.Enabled")), "\(options): no state keys")
        }
        XCTAssertEqual(model.names(inGroup: "vm.search"), [])
        assertThrows(.invalidKey, try table.create(key: "vm-x.search", options: options()))
    }

    func testOptionsAcceptVariantsAndRoundTrip() throws {
        try createText()
        let given: [String: DBusValue] = [
            "exec": .variant(.array(of: .string, [.string("/bin/echo"), .string("a b")])),
            "enabled_when": .variant(.string("vm.text != \"\"")),
            "concurrent": .variant(.boolean(true)),
            "timeout": .variant(.double(2.5)),
            "persistent": .variant(.boolean(false)),
            "description": .variant(.string("Search")),
            "writers": .variant(.array(of: .string, [.string("@wheel")])),
        ]
        _ = try table.create(key: "vm.search", options: given)
        let definition = try XCTUnwrap(table.definition(of: key("vm.search")))
        XCTAssertEqual(definition.work, .exec(["/bin/echo", "a b"]))
        XCTAssertEqual(definition.enabledWhen?.text, "vm.text != \"\"")
        XCTAssertTrue(definition.concurrent)
        XCTAssertEqual(definition.timeout, 2.5)
        XCTAssertFalse(definition.persistent)
        XCTAssertEqual(definition.description, "Search")
        XCTAssertEqual(definition.writers, ["@wheel"])
        XCTAssertEqual(try CommandDefinition(key: key("vm.search"), options: definition.options), definition)

        let handler = try CommandDefinition(key: key("vm.h"), options: ["handler": .boolean(true)])
        XCTAssertEqual(handler.work, .handler)
        XCTAssertTrue(handler.persistent, "persistent defaults to true")
        XCTAssertFalse(handler.concurrent, "concurrent defaults to false")
        XCTAssertNil(handler.timeout)
        XCTAssertEqual(try CommandDefinition(key: key("vm.h"), options: handler.options), handler)
    }

    func testRedefiningACommandKeepsItsRunningExecutions() throws {
        try createText("ab")
        _ = try table.create(key: "vm.search", options: options(["concurrent": .boolean(true)]))
        let running = try table.accept("vm.search", input: .string("")).execution
        let changes = try table.create(key: "vm.search", options: options(["enabled_when": .string("length(vm.text) > 3")]))
        XCTAssertFalse(changes.contains { if case .created = $0 { true } else { false } }, "state keys are kept: \(changes)")
        XCTAssertEqual(table.running(of: key("vm.search")), [running])
        XCTAssertEqual(try executing("vm.search"), true)
        XCTAssertEqual(try enabled("vm.search"), false, "now serial and its predicate fails")
        // The new predicate is watched, and only it.
        _ = try set("vm.text", .string("abcd"))
        XCTAssertEqual(try enabled("vm.search"), false, "still executing, serial")
        _ = table.finish(running.id, of: key("vm.search"))
        XCTAssertEqual(try enabled("vm.search"), true)
    }

    // MARK: 5. State keys

    func testStateKeysAreReadOnlyTransientAndTyped() throws {
        _ = try table.create(key: "vm.search", options: options())
        for (name, type) in [("Enabled", "b"), ("Executing", "b"), ("Executions", "u")] {
            let key = "vm.search." + name
            let definition = try model.entry(key).definition
            XCTAssertEqual(definition.type.signature, type, key)
            XCTAssertFalse(definition.writable, key)
            XCTAssertFalse(definition.persistent, key)
            XCTAssertEqual(definition.stateOf, self.key("vm.search"), key)
            assertThrows(.readOnly, containing: [key, "vm.search"], try model.set(key, to: name == "Executions" ? .uint32(5) : .boolean(true)))
            assertThrows(.readOnly, containing: [key], try model.reset(key))
            assertThrows(.readOnly, containing: [key, "DeleteCommand"], try model.delete(key: key))
            assertThrows(.readOnly, try model.apply(set: [], reset: [key]))
        }
        XCTAssertEqual(try enabled("vm.search"), true, "nothing changed")
        XCTAssertEqual(model.names(inGroup: "vm.search"), ["Enabled", "Executing", "Executions"])
    }

    func testTheCommandGroupHoldsOnlyItsState() throws {
        _ = try table.create(key: "vm.search", options: options())
        assertThrows(.exists, containing: ["vm.search.query", "vm.search"],
                     try model.create(key: "vm.search.query", type: "s", defaultValue: .string("")))
        assertThrows(.exists, containing: ["vm.search"],
                     try model.create(key: "vm.search.Enabled", type: "b", defaultValue: .boolean(true)))
        assertThrows(.exists, try model.create(key: "vm.search", type: "s", defaultValue: .string("")))
        XCTAssertEqual(model.names(inGroup: "vm.search"), ["Enabled", "Executing", "Executions"])
        // Siblings and deeper groups are fine.
        XCTAssertNoThrow(try model.create(key: "vm.query", type: "s", defaultValue: .string("")))
    }

    func testACommandCannotTakeAGroupOrKeyThatHoldsProperties() throws {
        _ = try model.create(key: "vm.search.query", type: "s", defaultValue: .string(""))
        assertThrows(.exists, containing: ["vm.search", "query"], try table.create(key: "vm.search", options: options()))
        _ = try model.create(key: "vm.load", type: "b", defaultValue: .boolean(false))
        assertThrows(.exists, containing: ["vm.load"], try table.create(key: "vm.load", options: options()))
        XCTAssertNil(table.definition(of: key("vm.search")))
        XCTAssertNil(table.definition(of: key("vm.load")))
        XCTAssertEqual(model.names(inGroup: "vm.search"), ["query"])
        XCTAssertEqual(model.names(inGroup: "vm.load"), [])
    }

    func testOneWayBindingFollowsExecutingThroughAcceptAndFinish() throws {
        _ = try model.create(key: "ui.activity", type: "b", defaultValue: .boolean(false), options: ["persistent": .boolean(false)])
        _ = try table.create(key: "vm.search", options: options())
        _ = try model.bind(key: "ui.activity", to: "vm.search.Executing", options: ["direction": .string("from")], owner: nil)
        XCTAssertEqual(try value("ui.activity"), .boolean(false))

        let (execution, changes) = try table.accept("vm.search", input: .string(""))
        XCTAssertTrue(changes.contains(.valueChanged(key("ui.activity"), old: .boolean(false))), "\(changes)")
        XCTAssertEqual(try value("ui.activity"), .boolean(true))

        let finished = table.finish(execution.id, of: key("vm.search"))
        XCTAssertTrue(finished.contains(.valueChanged(key("ui.activity"), old: .boolean(true))), "\(finished)")
        XCTAssertEqual(try value("ui.activity"), .boolean(false))
    }

    func testBindingThroughATransformFollowsExecutions() throws {
        _ = try model.create(key: "ui.label", type: "s", defaultValue: .string(""))
        _ = try table.create(key: "vm.fetch", options: options(["concurrent": .boolean(true)]))
        _ = try model.bind(key: "ui.label", to: "vm.fetch.Executions",
                           options: ["direction": .string("from"), "to_key": .string("string(value) + \" running\"")], owner: nil)
        XCTAssertEqual(try value("ui.label"), .string("0 running"))
        _ = try table.accept("vm.fetch", input: .string(""))
        _ = try table.accept("vm.fetch", input: .string(""))
        XCTAssertEqual(try value("ui.label"), .string("2 running"))
    }

    func testBindingThatWouldWriteAStateKeyIsRefused() throws {
        _ = try model.create(key: "ui.activity", type: "b", defaultValue: .boolean(false))
        _ = try table.create(key: "vm.search", options: options())
        // The state key as the side the binding writes at once.
        assertThrows(.readOnly, containing: ["vm.search.Executing"],
                     try model.bind(key: "ui.activity", to: "vm.search.Executing", options: ["direction": .string("to")], owner: nil))
        assertThrows(.readOnly, containing: ["vm.search.Executing"],
                     try model.bind(key: "vm.search.Executing", to: "ui.activity", options: [:], owner: nil))
        assertThrows(.readOnly, containing: ["vm.search.Executing"],
                     try model.bind(key: "vm.search.Executing", to: "ui.activity", options: ["direction": .string("from")], owner: nil))
        XCTAssertEqual(model.bindings.all.count, 0)
        XCTAssertEqual(try value("ui.activity"), .boolean(false))
        XCTAssertEqual(try executing("vm.search"), false)
        // The other way round, state leading one way, is fine.
        XCTAssertNoThrow(try model.bind(key: "vm.search.Executing", to: "ui.activity", options: ["direction": .string("to")], owner: nil))
        let (execution, _) = try table.accept("vm.search", input: .string(""))
        XCTAssertEqual(try value("ui.activity"), .boolean(true))
        _ = table.finish(execution.id, of: key("vm.search"))
        XCTAssertEqual(try value("ui.activity"), .boolean(false))
    }

    /// Like any read-only `to` (since 909664d): a two-way binding onto a state key is
    /// made, the key follows the state, and a write to the key fails atomically with ReadOnly.
    func testTwoWayBindingOntoAStateKeyFollowsItAndRefusesWrites() throws {
        _ = try model.create(key: "ui.activity", type: "b", defaultValue: .boolean(false))
        _ = try table.create(key: "vm.search", options: options())
        _ = try model.bind(key: "ui.activity", to: "vm.search.Executing", options: ["direction": .string("both")], owner: nil)
        let (execution, _) = try table.accept("vm.search", input: .string(""))
        XCTAssertEqual(try value("ui.activity"), .boolean(true))
        assertThrows(.readOnly, containing: ["vm.search.Executing"], try model.set("ui.activity", to: .boolean(false)))
        XCTAssertEqual(try value("ui.activity"), .boolean(true), "nothing changed")
        XCTAssertEqual(try executing("vm.search"), true)
        _ = table.finish(execution.id, of: key("vm.search"))
        XCTAssertEqual(try value("ui.activity"), .boolean(false))
    }

    func testStateChangesEvenWhenABoundPropertyRefusesTheValue() throws {
        // A `y` property that cannot hold more than 1 running execution.
        _ = try model.create(key: "ui.count", type: "y", defaultValue: .byte(0), options: ["maximum": .byte(1)])
        _ = try table.create(key: "vm.fetch", options: options(["concurrent": .boolean(true)]))
        _ = try model.bind(key: "ui.count", to: "vm.fetch.Executions", options: ["direction": .string("from")], owner: nil)
        _ = try table.accept("vm.fetch", input: .string(""))
        XCTAssertEqual(try value("ui.count"), .byte(1))
        _ = try table.accept("vm.fetch", input: .string(""))
        XCTAssertEqual(try executions("vm.fetch"), .uint32(2), "state is the truth")
        XCTAssertEqual(try value("ui.count"), .byte(1), "the bound property keeps its last valid value")
    }

    func testDeleteCommandRemovesItsStateAndReturnsRunningExecutions() throws {
        _ = try model.create(key: "ui.activity", type: "b", defaultValue: .boolean(false))
        _ = try table.create(key: "vm.search", options: options(["concurrent": .boolean(true)]))
        _ = try model.bind(key: "ui.activity", to: "vm.search.Executing", options: ["direction": .string("from")], owner: nil)
        let first = try table.accept("vm.search", input: .string("1")).execution
        let second = try table.accept("vm.search", input: .string("2")).execution

        let (ended, changes) = try table.delete(key: "vm.search")
        XCTAssertEqual(ended, [first, second])
        XCTAssertEqual(Set(changes.compactMap { if case .deleted(let key, _) = $0 { key.text } else { nil } }),
                       ["vm.search.Enabled", "vm.search.Executing", "vm.search.Executions"])
        XCTAssertTrue(changes.contains { if case .unbound = $0 { true } else { false } }, "the binding reading its state ends")
        XCTAssertEqual(model.bindings.all.count, 0)
        XCTAssertEqual(model.names(inGroup: "vm.search"), [])
        XCTAssertThrowsError(try model.entry("vm.search.Enabled"))
        XCTAssertNil(table.definition(of: key("vm.search")))
        XCTAssertEqual(table.runningCount, 0)
        XCTAssertEqual(table.finish(first.id, of: key("vm.search")), [], "a late finish is harmless")
        assertThrows(.unknownKey, containing: ["vm.search"], try table.delete(key: "vm.search"))
        assertThrows(.unknownKey, try table.accept("vm.search", input: .string("")))
        // The group is free again for properties.
        XCTAssertNoThrow(try model.create(key: "vm.search.query", type: "s", defaultValue: .string("")))
    }

    func testDeletedCommandNoLongerWatchesItsPredicateKeys() throws {
        try createText("ab")
        _ = try table.create(key: "vm.search", options: options(["enabled_when": .string("length(vm.text) > 3")]))
        _ = try table.delete(key: "vm.search")
        XCTAssertEqual(changedKeys(try set("vm.text", .string("abcdef"))), ["vm.text"])
    }

    func testReassertStateIsANoOpWhenInLine() throws {
        _ = try table.create(key: "vm.search", options: options())
        _ = try table.accept("vm.search", input: .string(""))
        XCTAssertEqual(table.reassertState(), [])
    }

    // MARK: 6. Rollback

    func testCommandCreatedInAFailedRoundIsGone() throws {
        try createText("abcd")
        XCTAssertTrue(endRound())
        _ = try table.create(key: "vm.search", options: options(["enabled_when": .string("length(vm.text) > 3")]))
        XCTAssertEqual(try enabled("vm.search"), true)
        store.failNextCommit = true
        XCTAssertFalse(endRound())

        XCTAssertNil(table.definition(of: key("vm.search")))
        XCTAssertEqual(table.definitions, [])
        XCTAssertThrowsError(try model.entry("vm.search.Enabled"))
        XCTAssertThrowsError(try model.entry("vm.search.Executing"))
        XCTAssertThrowsError(try model.entry("vm.search.Executions"))
        XCTAssertEqual(model.names(inGroup: "vm.search"), [])
        XCTAssertEqual(model.groupNames, ["vm"])
        assertThrows(.unknownKey, try table.accept("vm.search", input: .string("")))
        // Its predicate is no longer watched, and the group is free.
        XCTAssertEqual(table.refresh(after: try model.set("vm.text", to: .string("x"))), [])
        XCTAssertNoThrow(try model.create(key: "vm.search.query", type: "s", defaultValue: .string("")))
    }

    func testFailedRoundReturnsTheExecutionsOfCommandsItCreated() throws {
        XCTAssertTrue(endRound())
        _ = try table.create(key: "vm.search", options: options())
        let execution = try table.accept("vm.search", input: .string("")).execution
        store.failNextCommit = true
        XCTAssertThrowsError(try store.commit(model.takeWriteSet(), durability: .full))
        model.rollbackRound()
        XCTAssertEqual(table.rollbackRound(), [execution])
        XCTAssertEqual(table.reassertState(), [])
        XCTAssertEqual(table.runningCount, 0)
    }

    func testCommandDeletedInAFailedRoundComesBackUsable() throws {
        _ = try table.create(key: "vm.search", options: options())
        XCTAssertTrue(endRound())
        XCTAssertEqual(try enabled("vm.search"), true)

        _ = try table.delete(key: "vm.search")
        store.failNextCommit = true
        XCTAssertFalse(endRound())

        XCTAssertNotNil(table.definition(of: key("vm.search")))
        XCTAssertEqual(model.names(inGroup: "vm.search"), ["Enabled", "Executing", "Executions"])
        XCTAssertEqual(table.state(of: key("vm.search"))?.enabled, true, "a command without predicate that is not running is enabled")
        XCTAssertEqual(try enabled("vm.search"), true)
        XCTAssertNoThrow(try table.accept("vm.search", input: .string("")))
    }

    func testRedefinitionInAFailedRoundIsUndone() throws {
        try createText("ab")
        _ = try table.create(key: "vm.search", options: options())
        XCTAssertTrue(endRound())
        XCTAssertEqual(try enabled("vm.search"), true)

        _ = try table.create(key: "vm.search", options: options(["enabled_when": .string("length(vm.text) > 3")]))
        XCTAssertEqual(try enabled("vm.search"), false)
        store.failNextCommit = true
        XCTAssertFalse(endRound())

        XCTAssertNil(table.definition(of: key("vm.search"))?.enabledWhen, "the old definition is back")
        XCTAssertEqual(table.state(of: key("vm.search"))?.enabled, true, "and its state with it")
        XCTAssertEqual(try enabled("vm.search"), true)
        XCTAssertNoThrow(try table.accept("vm.search", input: .string("")))
    }

    /// `RegisterHandler` is not a store write: its reply goes out even when the round's commit
    /// fails, so the registration must survive the rollback of another call's CreateCommand.
    func testHandlerRegisteredInAFailedRoundStaysRegistered() throws {
        _ = try table.create(key: "vm.serve", options: ["handler": .boolean(true)])
        XCTAssertTrue(endRound())
        _ = try table.create(key: "vm.other", options: options())  // another client, same round
        _ = try table.registerHandler("vm.serve", owner: ":1.7")
        store.failNextCommit = true
        XCTAssertFalse(endRound())
        XCTAssertNil(table.definition(of: key("vm.other")))
        XCTAssertEqual(table.handler(of: key("vm.serve")), ":1.7", "the handler was told it is registered")
        XCTAssertEqual(try enabled("vm.serve"), true)
    }

    /// A handler that left the bus in a failed round must not come back: executions would be
    /// forwarded to a name that no longer exists.
    func testHandlerThatLeftInAFailedRoundStaysGone() throws {
        _ = try table.create(key: "vm.serve", options: ["handler": .boolean(true)])
        _ = try table.registerHandler("vm.serve", owner: ":1.7")
        XCTAssertTrue(endRound())
        _ = try table.create(key: "vm.other", options: options())
        _ = table.handlerLeft(":1.7")
        store.failNextCommit = true
        XCTAssertFalse(endRound())
        XCTAssertNil(table.handler(of: key("vm.serve")), "the vanished handler came back")
        XCTAssertEqual(try enabled("vm.serve"), false)
        assertThrows(.notEnabled, try table.accept("vm.serve", input: .string("")))
    }

    func testExecutionsAcceptedInAFailedRoundKeepTheirState() throws {
        _ = try table.create(key: "vm.search", options: options())
        XCTAssertTrue(endRound())
        let execution = try table.accept("vm.search", input: .string("")).execution
        try createText()
        store.failNextCommit = true
        XCTAssertFalse(endRound())
        // Executions went on regardless: the state keys reflect them after reassertState.
        XCTAssertEqual(table.running(of: key("vm.search")), [execution])
        XCTAssertEqual(try executing("vm.search"), true)
        XCTAssertEqual(try executions("vm.search"), .uint32(1))
        XCTAssertEqual(try enabled("vm.search"), false)
    }

    // MARK: Who owns a command's group

    /// The table, not the model, knows which keys are commands: the model
    /// asks it before creating a property, and a rolled-back round takes the command, and with it
    /// the refusal, away again.
    func testACommandsGroupHoldsOnlyItsStateUntilTheRoundThatMadeItRollsBack() throws {
        XCTAssertNil(Round(model: model, commands: table, store: store).end())
        _ = try table.create(key: "vm.search", options: options())
        for key in ["vm.search", "vm.search.extra"] {
            XCTAssertThrowsError(try model.create(key: key, type: "s", defaultValue: .string(""))) { error in
                XCTAssertEqual((error as? PropBusError)?.code, .exists, "\(key): \(error)")
            }
        }
        XCTAssertThrowsError(try model.delete(key: "vm.search.Enabled"), "state goes with DeleteCommand")
        store.failNextCommit = true
        XCTAssertNotNil(Round(model: model, commands: table, store: store).end())
        XCTAssertNil(table.definition(of: key("vm.search")))
        XCTAssertThrowsError(try model.entry("vm.search.Enabled"), "the state went with the rollback")
        _ = try model.create(key: "vm.search.extra", type: "s", defaultValue: .string(""))
        // And a group that holds properties takes no command.
        XCTAssertThrowsError(try table.create(key: "vm.search", options: options())) { error in
            XCTAssertEqual((error as? PropBusError)?.code, .exists)
        }
        _ = try model.delete(key: "vm.search.extra")
        _ = try table.create(key: "vm.search", options: options())
        _ = try table.delete(key: "vm.search")
        XCTAssertEqual(model.names(inGroup: "vm.search"), [], "DeleteCommand removes the state keys")
        _ = try model.create(key: "vm.search", type: "s", defaultValue: .string(""))
    }

    // MARK: Rights of the creator

    /// A table whose predicates read with their creator's rights: uid 1000 is in the `propbus`
    /// group (gid 500), so it may create commands, but not read a secret of root's.
    private func tableWithAccessControl() -> CommandTable {
        let accounts = Accounts.table(users: [:], groups: ["propbus": 500], memberships: [1000: [500]])
        model.bindingAuthority = BindingAuthority.enforcing(.enforcing(daemonUserID: 999, accounts: accounts))
        return table
    }

    private static let rootOnly: [String: DBusValue] = ["writers": .array(of: .string, [.string("0")])]

    func testAPredicateReadsWithItsCreatorsRightsAndANewSecretDisablesIt() throws {
        let table = tableWithAccessControl()
        _ = try model.create(key: "vault.pin", type: "i", defaultValue: .int32(4242), options: Self.rootOnly)
        _ = try table.create(key: "app.unlock", options: options(["enabled_when": .string("vault.pin > 4000")]), creator: 1000)
        XCTAssertEqual(try enabled("app.unlock"), true, "a public key is read")
        // Made secret later: Enabled must not tell uid 1000 (nor anyone) a bit of it.
        let changes = try model.create(key: "vault.pin", type: "i", defaultValue: .int32(4242),
                                       options: Self.rootOnly.merging(["secret": .boolean(true)]) { $1 })
        _ = table.refresh(after: changes)
        XCTAssertEqual(try enabled("app.unlock"), false)
        XCTAssertThrowsError(try table.accept("app.unlock", input: .string(""))) { error in
            let message = (error as? PropBusError)?.message ?? ""
            XCTAssertTrue(message.contains("uid 1000 may not read vault.pin"), message)
            XCTAssertFalse(message.contains("4242"), message)
        }
        // Root's own command reads it.
        _ = try table.create(key: "app.rootunlock", options: options(["enabled_when": .string("vault.pin > 4000")]), creator: 0)
        XCTAssertEqual(try enabled("app.rootunlock"), true)
    }
}
