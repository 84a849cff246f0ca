import DBus
import Foundation
import Observation
import PropBus
import PropBusClient
import XCTest

/// The Swift harness of the client conformance suite: each scenario file of `Tests/Conformance`
/// (read by the Python harness too, `clients/python/tests/test_conformance.py`) run against the
/// real daemon with the Swift library. The steps are described in `Tests/Conformance/README.md`.
final class ConformanceTests: ClientLibraryTestCase, @unchecked Sendable {
    override var daemonArguments: [String] { layerDirectoryArguments }

    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Conformance")

    static let scenarios = [
        "a-snapshot-under-racing-writes", "b-stale-and-resync", "c-change-stream-coalescing",
        "d-binding-rapid-alternation", "e-commands", "f-writability", "g-seeds",
    ]

    func testEveryScenarioFileHasATest() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.directory.path)
            .filter { $0.hasSuffix(".json") }.map { String($0.dropLast(5)) }.sorted()
        XCTAssertEqual(files, Self.scenarios.sorted(), "add a test method for each scenario file")
    }

    func testASnapshotUnderRacingWrites() async throws { try await run("a-snapshot-under-racing-writes") }
    func testBStaleAndResync() async throws { try await run("b-stale-and-resync") }
    func testCChangeStreamCoalescing() async throws { try await run("c-change-stream-coalescing") }
    func testDBindingRapidAlternation() async throws { try await run("d-binding-rapid-alternation") }
    func testECommands() async throws { try await run("e-commands") }
    func testFWritability() async throws { try await run("f-writability") }
    func testGSeeds() async throws { try await run("g-seeds") }

    @MainActor
    private func run(_ name: String) async throws {
        let data = try Data(contentsOf: Self.directory.appendingPathComponent(name + ".json"))
        guard let scenario = try JSONSerialization.jsonObject(with: data) as? [String: Any],
              let steps = scenario["steps"] as? [[String: Any]] else { throw TestSetupError("\(name): not a scenario") }
        let harness = await ConformanceHarness(test: self, name: name)
        for (index, step) in steps.enumerated() {
            do {
                try await harness.perform(step)
            } catch {
                XCTFail("\(name) step \(index + 1) \(step): \(error)")
                break
            }
        }
        harness.finish()
    }
}

/// A model attribute per D-Bus type a scenario binds.
@MainActor @Observable
final class ConformanceModel {
    var text = ""
    var number: Int32 = 0
}

/// A scenario's value as JSON says it, compared with what the library delivered.
enum ScenarioValue: Equatable, Sendable, CustomStringConvertible {
    case bool(Bool), int(Int64), double(Double), string(String)

    init?(json: Any?, type: String) {
        switch (type, json) {
        case ("b", let value as Bool): self = .bool(value)
        case ("s", let value as String): self = .string(value)
        case ("d", let value as Double): self = .double(value)
        case (_, let value as Int): self = .int(Int64(value))
        default: return nil
        }
    }

    init?(_ value: DBusValue) {
        switch value.unwrappingVariant {
        case .boolean(let value): self = .bool(value)
        case .int32(let value): self = .int(Int64(value))
        case .int64(let value): self = .int(value)
        case .double(let value): self = .double(value)
        case .string(let value): self = .string(value)
        default: return nil
        }
    }

    var dbusValue: DBusValue {
        switch self {
        case .bool(let value): .boolean(value)
        case .int(let value): .int32(Int32(value))
        case .double(let value): .double(value)
        case .string(let value): .string(value)
        }
    }

    var description: String {
        switch self {
        case .bool(let value): "\(value)"
        case .int(let value): "\(value)"
        case .double(let value): "\(value)"
        case .string(let value): "\"\(value)\""
        }
    }
}

struct ScenarioFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// What one running scenario holds: the client's properties and their recorded streams, bound
/// models, executions, observers, the world's bursts and overrides.
@MainActor
final class ConformanceHarness {
    private let test: ConformanceTests
    private let name: String
    private var library: PropBusClient { test.library }
    private var world: Client { test.client }
    /// Each key's D-Bus type, as the scenario created it (command state keys are `b`).
    private var types: [String: String] = [:]
    private var properties: [String: (current: () -> ScenarioValue?, live: () -> Bool, key: String)] = [:]
    private var recorded: [String: Locked<[ScenarioValue]>] = [:]
    private var models: [String: (model: ConformanceModel, type: String, binding: ChannelBinding, key: String)] = [:]
    private var modelWrites: [String: Int] = [:]
    private var bursts: [String: Task<Void, Error>] = [:]
    private var executions: [String: (String, UInt64)] = [:]
    private var observed: [String: Locked<[String]>] = [:]
    private var overrides: [String: UInt64] = [:]
    private var tasks: [Task<Void, Never>] = []
    private let ownerSeen = Locked<ContinuousClock.Instant?>(nil as ContinuousClock.Instant?)

    init(test: ConformanceTests, name: String) async {
        self.test = test
        self.name = name
        // When the daemon's name gets an owner, as a client sees it (to measure resyncs from).
        let seen = ownerSeen
        let connection = test.client.connection
        try? await connection.addMatch(.nameOwnerChanged(arg0: PropBusAPI.busName))
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            connection.queue.async {
                connection.addSignalHandler(matching: .nameOwnerChanged(arg0: PropBusAPI.busName)) { message in
                    if let arguments = try? message.arguments(), arguments.count == 3, arguments[2].stringValue?.isEmpty == false {
                        seen.withLock { $0 = ContinuousClock.now }
                    }
                }
                continuation.resume()
            }
        }
    }

    func finish() {
        for task in tasks { task.cancel() }
        for (_, entry) in models { entry.binding.cancel() }
    }

    /// Waits (20 s at most, for a loaded machine) until `condition` holds.
    private func until(_ what: @autoclosure () -> String, _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(20)
        while try await !condition() {
            if ContinuousClock.now > deadline { throw ScenarioFailure(what()) }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    func perform(_ step: [String: Any]) async throws {
        guard let verb = ["create", "create_command", "set", "burst", "await", "expect_daemon", "restart_daemon", "lock",
                          "unlock", "override", "release", "open", "expect", "expect_state", "expect_recorded", "bind",
                          "model_set", "model_set_and_execute", "expect_model", "expect_binding_state", "alternate",
                          "expect_agree", "expect_client_writes", "execute", "execute_and_cancel_task", "start", "cancel",
                          "observe", "expect_events"].first(where: { step[$0] != nil }) else {
            throw ScenarioFailure("unknown step \(step)")
        }
        let subject = step[verb] as? String ?? ""
        switch verb {
        case "create": try await create(subject, step)
        case "create_command":
            var options: [String: DBusValue] = ["exec": .array(of: .string, ["/bin/sh", "-c", step["script"] as? String ?? ""].map { .string($0) }),
                                                "persistent": .boolean(false)]
            if let predicate = step["enabled_when"] as? String { options["enabled_when"] = .string(predicate) }
            try await world.call(PropBusAPI.manager, "CreateCommand", [.string(subject), .vardict(options)])
            types[subject + ".Enabled"] = "b"
            types[subject + ".Executing"] = "b"
        case "set": try await world.set(subject, try value(step, type: step["type"] as? String))
        case "burst": burst(subject, step)
        case "await": try await bursts[subject]?.value
        case "expect_daemon":
            let expected = try value(step, type: types[subject])
            let actual = try await world.get(subject)
            guard actual == expected else { throw ScenarioFailure("the daemon has \(actual), not \(expected)") }
        case "restart_daemon": try await restartDaemon(step)
        case "lock", "unlock": try await lock(subject, step, locked: verb == "lock")
        case "override":
            let reply = try await world.call(PropBusAPI.manager, "Override", [.string(subject), .variant(try value(step, type: step["type"] as? String)), .vardict([:])])
            guard case .uint64(let handle)? = reply.first else { throw ScenarioFailure("Override replied \(reply)") }
            overrides[step["as"] as? String ?? ""] = handle
        case "release": try await world.call(PropBusAPI.manager, "ReleaseOverride", [.uint64(overrides[subject] ?? 0)])
        case "open": open(subject, step)
        case "expect", "expect_state", "expect_recorded": try await expectProperty(verb, subject, step)
        case "bind": bind(subject, step)
        case "model_set", "model_set_and_execute": try await modelSet(subject, step, execute: verb == "model_set_and_execute")
        case "expect_model":
            guard let entry = models[subject] else { throw ScenarioFailure("no binding \(subject)") }
            let expected = ScenarioValue(json: step["value"], type: entry.type)
            try await until("the model of \(subject) shows \(self.modelValue(subject).map(\.description) ?? "nil"), not \(expected.map(\.description) ?? "nil")") {
                modelValue(subject) == expected
            }
        case "expect_binding_state":
            guard let binding = models[subject]?.binding else { throw ScenarioFailure("no binding \(subject)") }
            let wanted = step["state"] as? String ?? ""
            try await until("\(subject) is \(binding.state), not \(wanted)") { Self.stateName(binding.state) == wanted }
        case "alternate": try await alternate(subject, step)
        case "expect_agree": try await expectAgree(subject, step)
        case "expect_client_writes": try await expectClientWrites(subject)
        case "execute": try await execute(subject, step)
        case "execute_and_cancel_task": try await executeAndCancel(subject)
        case "start":
            let id = try await library.command(subject).start(step["input"] as? String ?? "")
            executions[step["as"] as? String ?? ""] = (subject, id)
        case "cancel":
            guard let (key, id) = executions[subject] else { throw ScenarioFailure("no execution \(subject)") }
            try await library.command(key).cancel(id)
        case "observe": try await observe(subject, step)
        case "expect_events":
            let wanted = step["kinds"] as? [String] ?? []
            guard let kinds = observed[subject] else { throw ScenarioFailure("no observer \(subject)") }
            try await until("\(subject) observed \(kinds.withLock { $0 }), not \(wanted)") { kinds.withLock { $0 } == wanted }
        default: throw ScenarioFailure("unknown step \(verb)")
        }
    }

    private func value(_ step: [String: Any], type: String?) throws -> DBusValue {
        guard let type, let value = ScenarioValue(json: step["value"], type: type) else {
            throw ScenarioFailure("cannot read \(step["value"] ?? "nil") as '\(type ?? "?")'")
        }
        return value.dbusValue
    }

    // MARK: The world

    private func create(_ key: String, _ step: [String: Any]) async throws {
        let type = step["type"] as? String ?? ""
        types[key] = type
        guard let initial = ScenarioValue(json: step["default"], type: type) else { throw ScenarioFailure("bad default in \(step)") }
        var options: [String: DBusValue] = ["persistent": .boolean(step["persistent"] as? Bool ?? false)]
        if let writable = step["writable"] as? Bool { options["writable"] = .boolean(writable) }
        if let choices = step["choices"] as? [Any] {
            options["choices"] = .array(of: .variant, choices.compactMap { ScenarioValue(json: $0, type: type).map { .variant($0.dbusValue) } })
        }
        try await world.create(key, type, default: initial.dbusValue, options: options)
    }

    private func burst(_ key: String, _ step: [String: Any]) {
        let from = step["from"] as? Int ?? 0, to = step["to"] as? Int ?? 0
        let window = step["one_at_a_time"] as? Bool == true ? 1 : 64
        let connection = world.connection
        bursts[step["as"] as? String ?? ""] = Task {
            try await Self.pipelinedSets(of: key, values: Array(from...to), window: window, on: connection)
        }
    }

    /// Sets `key` to each of `values`, in order, with up to `window` calls on their way (sent
    /// from the connection's queue, so they leave in order).
    private nonisolated static func pipelinedSets(of key: String, values: [Int], window: Int, on connection: Connection) async throws {
        let (path, name) = PropBusAPI.locate(key)
        let failure: DBusError? = await withCheckedContinuation { continuation in
            connection.queue.async {
                var next = 0, answered = 0, failed: DBusError?
                func send() {
                    guard next < values.count else { return }
                    let value = values[next]
                    next += 1
                    guard let message = try? Message.methodCall(destination: PropBusAPI.busName, path: path,
                                                                interface: PropBusAPI.properties, member: "Set"),
                          (try? message.append([.string(PropBusAPI.values), .string(name), .variant(.int32(Int32(value)))])) != nil
                    else { failed = DBusError(name: DBusError.Name.failed, message: "cannot build a Set"); return }
                    connection.call(message) { result in
                        answered += 1
                        if case .failure(let error) = result { failed = failed ?? error }
                        if case .success(let reply) = result, let error = reply.error { failed = failed ?? error }
                        if answered == values.count { continuation.resume(returning: failed) } else { send() }
                    }
                }
                for _ in 0..<min(window, values.count) { send() }
            }
        }
        if let failure { throw failure }
    }

    private func restartDaemon(_ step: [String: Any]) async throws {
        let kill = step["kill"] as? Bool ?? false
        if kill { test.daemon.process.signal(SIGKILL) }
        await test.daemon.stop()
        for name in step["stale"] as? [String] ?? [] {
            guard let property = properties[name] else { throw ScenarioFailure("no property \(name)") }
            try await until("\(name) is not stale") { !property.live() }
        }
        ownerSeen.withLock { $0 = nil }
        test.daemon = try await Daemon.start(on: test.bus, arguments: test.daemonArguments, watcher: world)
        let resync = (step["resync"] as? [String] ?? []).compactMap { properties[$0] }
        try await until("not live after the restart") { resync.allSatisfy { $0.live() } }
        let live = ContinuousClock.now
        guard let owned = ownerSeen.withLock({ $0 }) else { throw ScenarioFailure("no NameOwnerChanged seen") }
        let elapsed = Double((live - owned).components.attoseconds) / 1e15 + Double((live - owned).components.seconds) * 1000
        let goal = Double(step["goal_ms"] as? Int ?? 100)
        print("conformance \(name): live \(String(format: "%.1f", elapsed)) ms after the daemon owned its name again (goal \(Int(goal)) ms)")
        guard elapsed <= 10 * goal else { throw ScenarioFailure("live only \(elapsed) ms after the daemon returned (goal \(goal) ms)") }
    }

    private func lock(_ key: String, _ step: [String: Any], locked: Bool) async throws {
        let folder = test.configDirectory.appendingPathComponent("mandatory.d")
        let file = folder.appendingPathComponent("50-conformance.json")
        if locked {
            let user = String(cString: getpwuid(getuid()).pointee.pw_name)
            let entry: [String: Any] = [key: ["value": step["value"] ?? NSNull(), "for": [user]]]
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            try JSONSerialization.data(withJSONObject: entry).write(to: file)
        } else {
            try? FileManager.default.removeItem(at: file)
        }
        try await world.call(PropBusAPI.manager, "Reload")
    }

    // MARK: Properties

    private func open(_ key: String, _ step: [String: Any]) {
        let alias = step["as"] as? String ?? key
        let coalesce = step["coalesce"] as? Bool ?? false
        let pause = step["slow_ms"] as? Int ?? 0
        let record = Locked<[ScenarioValue]>([])
        recorded[alias] = record
        func follow<Value: DBusValueConvertible>(_ property: Property<Value>) {
            properties[alias] = ({ property.current.flatMap { ScenarioValue($0.dbusValue) } }, { property.state == .live }, key)
            let values = property.values(coalescing: coalesce)
            tasks.append(Task.detached {
                for await value in values {
                    if let scenario = ScenarioValue(value.dbusValue) { record.withLock { $0.append(scenario) } }
                    if pause > 0 { try? await Task.sleep(for: .milliseconds(pause)) }
                }
            })
        }
        switch types[key] {
        case "b": follow(library.property(key, as: Bool.self))
        case "s": follow(library.property(key, as: String.self))
        case "d": follow(library.property(key, as: Double.self))
        default: follow(library.property(key, as: Int32.self))
        }
    }

    private func expectProperty(_ verb: String, _ alias: String, _ step: [String: Any]) async throws {
        guard let property = properties[alias], let record = recorded[alias] else { throw ScenarioFailure("no property \(alias)") }
        let type = types[property.key] ?? "i"
        switch verb {
        case "expect":
            let expected = ScenarioValue(json: step["value"], type: type)
            try await until("\(alias) is \(property.current().map(\.description) ?? "nil"), not \(expected.map(\.description) ?? "nil")") {
                property.current() == expected && property.live()
            }
        case "expect_state":
            let wanted = step["state"] as? String == "live"
            try await until("\(alias) is not \(step["state"] ?? "")") { property.live() == wanted }
        default:
            let seen: () -> [ScenarioValue] = { record.withLock { $0 } }
            if let last = ScenarioValue(json: step["last"], type: type) {
                try await until("\(alias) recorded last \(seen().last.map(\.description) ?? "nothing")") { seen().last == last }
            }
            if let equals = step["equals"] as? [Any] {
                let expected = equals.compactMap { ScenarioValue(json: $0, type: type) }
                try await until("\(alias) recorded \(seen())") { seen() == expected }
            }
            if let count = step["count"] as? Int {
                try await until("\(alias) recorded \(seen().count) values") { seen().count == count }
            }
            if step["increasing"] as? Bool == true {
                let values = seen().compactMap { if case .int(let n) = $0 { n } else { nil } }
                guard zip(values, values.dropFirst()).allSatisfy({ $0 < $1 }) else {
                    throw ScenarioFailure("\(alias) went back or repeated: \(values.prefix(50))")
                }
            }
            if let limit = step["fewer_than"] as? Int, seen().count >= limit {
                throw ScenarioFailure("\(alias) recorded \(seen().count) values")
            }
        }
    }

    // MARK: Bindings

    private func bind(_ key: String, _ step: [String: Any]) {
        let alias = step["as"] as? String ?? key
        let type = step["type"] as? String ?? types[key] ?? "s"
        let model = ConformanceModel()
        let binding: ChannelBinding
        if type == "i" {
            model.number = Int32(step["initial"] as? Int ?? 0)
            binding = library.channel(library.property(key, as: Int32.self)).bind(\.number, of: model)
        } else {
            model.text = step["initial"] as? String ?? ""
            let property = library.property(key, as: String.self)
            if step["map"] as? String == "onoff" {
                // The seeds' switch: the model shows On/Off, the key holds "1"/"0".
                binding = library.channel(property).bind(\.text, of: model, toBus: { $0 == "On" ? "1" : "0" },
                                                         fromBus: { $0 == "1" ? "On" : "Off" })
            } else {
                binding = library.channel(property).bind(\.text, of: model)
            }
        }
        models[alias] = (model, type, binding, key)
        modelWrites[alias] = 0
    }

    private func modelValue(_ alias: String) -> ScenarioValue? {
        guard let entry = models[alias] else { return nil }
        return entry.type == "i" ? .int(Int64(entry.model.number)) : .string(entry.model.text)
    }

    private func writeModel(_ alias: String, _ value: Any?) throws {
        guard let entry = models[alias] else { throw ScenarioFailure("no binding \(alias)") }
        switch ScenarioValue(json: value, type: entry.type) {
        case .int(let number): entry.model.number = Int32(number)
        case .string(let text): entry.model.text = text
        default: throw ScenarioFailure("cannot write \(value ?? "nil") to \(alias)")
        }
        modelWrites[alias, default: 0] += 1
    }

    private func modelSet(_ alias: String, _ step: [String: Any], execute: Bool) async throws {
        try writeModel(alias, step["value"])
        if execute {
            // The same main-actor turn as the write: the command must see it.
            let result = try await library.command(step["command"] as? String ?? "").execute(step["input"] as? String ?? "")
            guard result == step["result"] as? String else { throw ScenarioFailure("the result is \(result)") }
        } else if step["commit"] as? Bool == true {
            await models[alias]?.binding.committed()
        }
    }

    static func stateName(_ state: BindingState) -> String {
        switch state {
        case .live: "live"
        case .stale: "stale"
        case .refused: "refused"
        case .overridden: "overridden"
        case .readOnly: "read_only"
        case .locked: "locked"
        }
    }

    private func alternate(_ alias: String, _ step: [String: Any]) async throws {
        let count = step["count"] as? Int ?? 0, key = step["key"] as? String ?? ""
        var writes: [Task<Void, Error>] = []
        let world = world
        for index in 0..<count {
            if index % 2 == 0 {
                try writeModel(alias, index + 1)
            } else {
                writes.append(Task { try await world.set(key, .int32(Int32(index + 1))) })
            }
            await Task.yield()
        }
        for write in writes { try await write.value }
        await models[alias]?.binding.committed()
    }

    private func expectAgree(_ alias: String, _ step: [String: Any]) async throws {
        guard let entry = models[alias] else { throw ScenarioFailure("no binding \(alias)") }
        let key = step["key"] as? String ?? entry.key
        let property = properties[alias] ?? {
            let property = library.property(key, as: Int32.self)
            return ({ property.current.map { .int(Int64($0)) } }, { property.state == .live }, key)
        }()
        properties[alias] = property
        var daemon = ScenarioValue(try await world.get(key))
        try await until("model \(modelValue(alias).map(\.description) ?? "nil"), client \(property.current().map(\.description) ?? "nil"), daemon \(daemon.map(\.description) ?? "nil")") {
            daemon = ScenarioValue(try await world.get(key))
            return modelValue(alias) == daemon && property.current() == daemon
        }
    }

    private func expectClientWrites(_ alias: String) async throws {
        guard let entry = models[alias] else { throw ScenarioFailure("no binding \(alias)") }
        await entry.binding.committed()
        let reply = try await world.call(PropBusAPI.manager, "ListHistory", [.string(entry.key), .uint64(0), .uint32(0), .vardict([:])])
        guard case .array(_, let rows)? = reply.first else { throw ScenarioFailure("ListHistory replied \(reply)") }
        let own = library.uniqueName
        let mine = rows.filter { $0.stringKeyedEntries?["bus_name"]?.unwrappingVariant.stringValue == own }.count
        guard mine <= modelWrites[alias] ?? 0 else {
            throw ScenarioFailure("\(mine) writes by the client for \(modelWrites[alias] ?? 0) model writes")
        }
    }

    // MARK: Commands

    private func execute(_ key: String, _ step: [String: Any]) async throws {
        let command = library.command(key)
        do {
            let result = try await command.execute(step["input"] as? String ?? "")
            if let error = step["error"] as? String { throw ScenarioFailure("expected \(error), got the result \(result)") }
            guard result == step["result"] as? String else { throw ScenarioFailure("the result is \(result)") }
        } catch let error as PropBusClientError {
            guard let wanted = step["error"] as? String, error.name.hasSuffix("." + wanted) else { throw ScenarioFailure("failed: \(error)") }
            if let part = step["message_contains"] as? String, !error.message.contains(part) {
                throw ScenarioFailure("the message '\(error.message)' does not say '\(part)'")
            }
        }
    }

    private func executeAndCancel(_ key: String) async throws {
        let command = library.command(key)
        try await until("\(key).Executing never read") { command.executing.state == .live }
        let run = Task { try await command.execute("") }
        try await until("\(key) never executing") { command.executing.current == true }
        let cancelled = ContinuousClock.now
        run.cancel()
        let outcome = await run.result
        guard ContinuousClock.now - cancelled < .seconds(10) else { throw ScenarioFailure("the await outlived its cancellation") }
        guard case .failure(let error as PropBusClientError) = outcome, error.name == PropBusClientError.Name.cancelled else {
            throw ScenarioFailure("a cancelled execute ended with \(outcome)")
        }
        try await until("\(key) still executing after the cancel") { command.executing.current == false }
    }

    private func observe(_ key: String, _ step: [String: Any]) async throws {
        let kinds = Locked<[String]>([])
        observed[step["as"] as? String ?? key] = kinds
        let events = await library.command(key).subscribedExecutions()
        tasks.append(Task.detached {
            for await event in events {
                let kind: String
                switch event {
                case .started: kind = "started"
                case .finished: kind = "finished"
                case .failed(_, let error): kind = "failed:" + (error.name.split(separator: ".").last.map(String.init) ?? error.name)
                }
                kinds.withLock { $0.append(kind) }
            }
        })
    }
}

/// A value behind a lock, shared between the harness and its recording tasks.
final class Locked<Value>: @unchecked Sendable {
    // @unchecked: `value` is only touched under `lock`.
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<R>(_ body: (inout Value) -> R) -> R {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}
