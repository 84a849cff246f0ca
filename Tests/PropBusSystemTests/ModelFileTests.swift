import DBusValues
import Foundation
import PropBus
import PropBusModelFiles
import PropBusSystem
import XCTest

final class ModelFileTests: XCTestCase {
    private func load(_ text: String) throws -> ModelFile { try ModelFile(path: "test.json", text: text) }

    private func assertFails(_ text: String, containing pieces: [String], file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try load(text), file: file, line: line) { error in
            let message = (error as? PropBusError)?.message ?? "\(error)"
            XCTAssertTrue(message.hasPrefix("test.json:"), message, file: file, line: line)
            for piece in pieces { XCTAssertTrue(message.contains(piece), "\(message) lacks \(piece)", file: file, line: line) }
        }
    }

    /// A file with two mistakes reports both at once, each with its line, so one reload shows
    /// everything to fix; never a value.
    func testEveryMistakeOfAFileIsReportedInOneError() {
        let text = """
            {"groups": {"ui": {"properties": {
              "volume": {"type": "i", "default": "loud-secret"},
              "theme": {"type": "s", "colour": "dark"}
            }}},
             "bindings": [{"key": "ui.theme"}]}
            """
        XCTAssertThrowsError(try load(text)) { error in
            let message = (error as? PropBusError)?.message ?? "\(error)"
            let lines = message.split(separator: "\n").map(String.init)
            XCTAssertEqual(lines.count, 3, message)
            XCTAssertTrue(lines.first?.hasPrefix("test.json:2:") ?? false && lines[0].contains("ui.volume: \"default\""), message)
            XCTAssertTrue(lines.count > 1 && lines[1].hasPrefix("test.json:3:") && lines[1].contains("ui.theme: unknown field \"colour\""), message)
            XCTAssertTrue(lines.count > 2 && lines[2].contains("binding"), message)
            XCTAssertFalse(message.contains("loud-secret"), "a value was quoted: \(message)")
        }
    }

    /// A mistake found when the file is read and a type change only the model can see are
    /// reported together, as docs/model-files.md shows them; so are two type changes.
    func testAReadMistakeAndATypeChangeAreReportedInOneReload() throws {
        let store = MemoryStore()
        let model = try PropertyModel(store: store)
        let commands = CommandTable(model: model)
        _ = try model.create(key: "ui.mode", type: "i", defaultValue: .int32(0), options: [:])
        _ = try model.create(key: "ui.size", type: "i", defaultValue: .int32(0), options: [:])
        let directory = try FileManager.default.url(for: .itemReplacementDirectory, in: .userDomainMask,
                                                    appropriateFor: URL(fileURLWithPath: NSTemporaryDirectory()), create: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let both = directory.appendingPathComponent("ui.json").path
        try """
            {"groups": {"ui": {"properties": {
              "mode": {"type": "s", "default": "dark"},
              "volume": {"type": "y", "default": 500}
            }}}}
            """.write(toFile: both, atomically: true, encoding: .utf8)
        let twoTypes = directory.appendingPathComponent("sizes.json").path
        try #"{"groups": {"ui": {"properties": {"mode": {"type": "s"}, "size": {"type": "d"}}}}}"#.write(toFile: twoTypes, atomically: true, encoding: .utf8)
        let files = ModelFileSet()
        _ = try files.load([both, twoTypes], into: model, commands: commands, strict: false)
        let reasons = files.skipped.map(\.reason)
        XCTAssertEqual(reasons.count, 2, "\(files.skipped)")
        let first = reasons.first?.split(separator: "\n").map(String.init) ?? []
        XCTAssertEqual(first.count, 2, "\(reasons)")
        XCTAssertTrue(first.first?.hasPrefix(both + ":3:") == true && first[0].contains("ui.volume: \"default\" is not a valid 'y' value"), "\(first)")
        XCTAssertTrue(first.count > 1 && first[1].hasPrefix(both + ":2:") && first[1].contains("ui.mode: property ui.mode already exists with type 'i'; cannot register it as 's'; to migrate"), "\(first)")
        let second = reasons.last?.split(separator: "\n").map(String.init) ?? []
        XCTAssertEqual(second.count, 2, "both type changes: \(reasons)")
        XCTAssertTrue(second.contains { $0.contains("ui.size: property ui.size already exists with type 'i'; cannot register it as 'd'") }, "\(second)")
        XCTAssertEqual(model.definition(for: try Key("ui.mode"))?.type, .int32, "nothing of a skipped file applies")
    }

    func testASharedDefinitionIsDeclaredOnlyAsItIsAndItsValueIsLeftOut() throws {
        let model = try PropertyModel(store: MemoryStore())
        _ = try model.create(key: "f.level", type: "i", defaultValue: .int32(50), options: ["scope": .string("fleet")])
        model.commitRound()
        let commands = CommandTable(model: model)
        // Shared when fleet-scoped; refused when the declaration's default is not 50.
        let shared = SharedDefinitions(contains: { $0.scope == .fleet },
                                       refusal: { $1.defaultValue == $0.defaultValue ? nil : "differs from the shared definition" })
        let same = try load(#"{"groups": {"f": {"properties": {"level": {"type": "i", "default": 50, "scope": "fleet", "value": 9}}}}}"#)
        _ = try same.apply(to: model, commands: commands, shared: shared)
        XCTAssertEqual(try model.value(of: "f.level"), .int32(50), "the file's value set a shared key")
        XCTAssertEqual(try model.entry("f.level").definition.source, "test.json")

        let other = try load(#"{"groups": {"f": {"properties": {"level": {"type": "i", "default": 70, "scope": "fleet"}}}}}"#)
        XCTAssertThrowsError(try other.apply(to: model, commands: commands, shared: shared)) { error in
            let message = (error as? PropBusError)?.message ?? "\(error)"
            XCTAssertTrue(message.hasPrefix("test.json:") && message.contains("f.level: differs from the shared definition"), message)
        }
        // Without the rule (no --fleet), a file's declaration applies as ever.
        model.rollbackRound()
        _ = try same.apply(to: model, commands: commands)
        XCTAssertEqual(try model.value(of: "f.level"), .int32(9))
    }

    /// A file that changes a local key's value (a new default, no stored value) must not carry
    /// that change through a binding (made by Bind, stored) into a shared key: that write would
    /// change the fleet key on this host only, outside any call, and never reach etcd.
    func testARedeclaredLocalKeyDoesNotDriveASharedKeyThroughABinding() throws {
        let model = try PropertyModel(store: MemoryStore())
        _ = try model.create(key: "f.level", type: "i", defaultValue: .int32(50), options: ["scope": .string("fleet")])
        _ = try model.create(key: "h.level", type: "i", defaultValue: .int32(50), options: ["source": .string("test.json")])
        _ = try model.bind(key: "h.level", to: "f.level", options: [:], owner: nil)
        model.commitRound()
        let commands = CommandTable(model: model)
        let shared = SharedDefinitions(contains: { $0.scope == .fleet }, refusal: { _, _ in nil })

        let file = try load(#"{"groups": {"h": {"properties": {"level": {"type": "i", "default": 7}}}}}"#)
        _ = try file.apply(to: model, commands: commands, shared: shared)
        XCTAssertEqual(try model.value(of: "h.level"), .int32(7))
        XCTAssertEqual(try model.value(of: "f.level"), .int32(50), "the file's new default reached a shared key through a binding")
    }

    func testFlickrSearchExampleLoadsAndRegistersItsProperties() throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("examples/flickr-search.json").path
        let file = try ModelFile(contentsOf: path)
        let model = try PropertyModel(store: MemoryStore())
        _ = try file.apply(to: model, commands: CommandTable(model: model))
        XCTAssertEqual(try model.value(of: "viewmodel.title"), .string("Flickr Search"))
        XCTAssertFalse(try model.entry("viewmodel.title").definition.writable)
        XCTAssertFalse(try model.entry("viewmodel.searchText").definition.persistent)
        XCTAssertEqual(try model.value(of: "settings.someBoolKey"), .boolean(false))
        XCTAssertEqual(file.commands.map(\.key.text), ["viewmodel.executeSearch"])
    }

    func testAnUnreadableOrNonUTF8ModelFileIsRefusedWithTheReason() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("modelfile-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let missing = directory.appendingPathComponent("missing.json").path
        XCTAssertThrowsError(try ModelFile(contentsOf: missing)) { error in
            XCTAssertEqual((error as? PropBusError)?.message, "\(missing): cannot read the model file: No such file or directory")
        }
        let latin1 = directory.appendingPathComponent("latin1.json").path
        // "café" in Latin-1: the é is the lone byte E9.
        try Data(Array(#"{"groups": {}, "description": "caf"#.utf8) + [0xE9] + Array(#""}"#.utf8)).write(to: URL(fileURLWithPath: latin1))
        XCTAssertThrowsError(try ModelFile(contentsOf: latin1)) { error in
            XCTAssertEqual((error as? PropBusError)?.message, "\(latin1): cannot read the model file: it is not UTF-8 text")
        }
        XCTAssertEqual(ModelFile.files(in: directory.path), [latin1])
        XCTAssertEqual(ModelFile.files(in: missing), [])
    }

    func testValuesAreReadByTheDeclaredType() throws {
        let file = try load("""
            {"groups": {"ui": {"properties": {
              "tags": {"type": "as", "default": ["a", "b"]},
              "volume": {"type": "y", "default": 5, "minimum": 0, "maximum": 10},
              "opts": {"type": "a{sv}", "default": {"k": 1}}
            }}}}
            """)
        let model = try PropertyModel(store: MemoryStore())
        _ = try file.apply(to: model, commands: CommandTable(model: model))
        XCTAssertEqual(try model.value(of: "ui.tags"), .array(of: .string, [.string("a"), .string("b")]))
        XCTAssertEqual(try model.value(of: "ui.volume"), .byte(5))
        XCTAssertThrowsError(try model.set("ui.volume", to: .byte(11)))
    }

    func testErrorsNameTheFileTheKeyAndTheProblem() {
        assertFails(#"{"groups": {"a": {"properties": {"b": {"type": "zz"}}}}}"#, containing: ["a.b", "zz"])
        assertFails(#"{"groups": "#, containing: ["invalid JSON"])
        assertFails(#"{"groups": {"a": {"properties": {"b": {"type": "y", "default": 300}}}}}"#, containing: ["a.b", "default", "value refused", "(0…255)"])
        assertFails(#"{"groups": {"a": {"properties": {"b": {"type": "s", "colour": 1}}}}}"#, containing: ["a.b", "colour"])
        assertFails(#"{"groups": {"a-b": {"properties": {"c": {"type": "s"}}}}}"#, containing: ["a-b.c", "'-'"])
        assertFails(#"{"groups": {"a": {"properties": {"b": {}}}}}"#, containing: ["a.b", "type"])
        assertFails(#"{"groups": {"a": {"commands": {"run": {"enabled_when": "length("}}}}}"#, containing: ["a.run", "enabled_when"])
        assertFails(#"{"bindings": [{"key": "a.b"}]}"#, containing: ["bindings[0]"])
        // A command whose state keys (KEY.Executions) would pass 255 bytes.
        let name = String(repeating: "r", count: 250)
        assertFails(#"{"groups": {"a": {"commands": {"\#(name)": {"exec": ["true"]}}}}}"#, containing: ["a.\(name)", "a.\(name).Executions", "244"])
        assertFails(#"{"grops": {}}"#, containing: ["grops"])
    }

    /// A binding's options are read as `Bind` reads them, when the file is read: a direction
    /// `Bind` would refuse is a mistake of the file, reported with the others, not at apply.
    func testABindingsOptionsAreCheckedAsBindChecksThemWhenTheFileIsRead() {
        assertFails(#"{"bindings": [{"key": "a.b", "to": "a.c", "direction": "sideways"}]}"#,
                    containing: ["bindings[0]", "direction", "both, from, to"])
        assertFails(#"{"bindings": [{"key": "a.b", "to": "a.c", "to_key": "value +"}]}"#, containing: ["bindings[0]", "to_key"])
    }

    func testApplyErrorsNameTheFileAndKey() throws {
        let file = try load(#"{"groups": {"a": {"properties": {"b": {"type": "i", "default": 50, "maximum": 10}}}}}"#)
        let model = try PropertyModel(store: MemoryStore())
        XCTAssertThrowsError(try file.apply(to: model, commands: CommandTable(model: model))) { error in
            let message = (error as? PropBusError)?.message ?? ""
            XCTAssertTrue(message.hasPrefix("test.json:") && message.contains(": a.b: "), message)
        }
    }

    func testDeclaredBindingsAreMade() throws {
        let file = try load("""
            {"groups": {"ui": {"properties": {"on": {"type": "b"}}}, "settings": {"properties": {"on": {"type": "b", "default": true}}}},
             "bindings": [{"key": "ui.on", "to": "settings.on"}]}
            """)
        let model = try PropertyModel(store: MemoryStore())
        _ = try file.apply(to: model, commands: CommandTable(model: model))
        XCTAssertEqual(try model.value(of: "ui.on"), .boolean(true))
        XCTAssertEqual(model.bindings.all.count, 1)
        XCTAssertFalse(model.bindings.all[0].persistent)
    }

    func testRedeclaringKeepsStoredValuesAcrossRestarts() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("propbus-model-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = try load(#"{"groups": {"s": {"properties": {"x": {"type": "i", "default": 1}}}}}"#)
        do {
            let store = try SQLiteStore(path: directory + "/propbus.db")
            let model = try PropertyModel(store: store)
            _ = try file.apply(to: model, commands: CommandTable(model: model))
            _ = try model.set("s.x", to: .int32(42))
            try model.commit(to: store)
        }
        let store = try SQLiteStore(path: directory + "/propbus.db")
        let model = try PropertyModel(store: store)
        _ = try file.apply(to: model, commands: CommandTable(model: model))
        XCTAssertEqual(try model.value(of: "s.x"), .int32(42))
    }

    // MARK: What a model file can make the daemon say

    /// Reads and applies `text` to a new model: the error either step throws.
    private func applyError(_ text: String) -> String? {
        do {
            let file = try load(text)
            let model = try PropertyModel(store: MemoryStore())
            _ = try file.apply(to: model, commands: CommandTable(model: model))
            return nil
        } catch {
            return (error as? PropBusError)?.message ?? "\(error)"
        }
    }

    func testAProblemNeverQuotesTheValueItRefusesButSaysWhatWasExpected() {
        let cases: [(String, [String])] = [
            (#"{"groups": {"v": {"properties": {"code": {"type": "i", "default": "hunter2-token", "secret": true}}}}}"#, ["v.code", "\"default\"", "an integer"]),
            (#"{"groups": {"v": {"properties": {"code": {"type": "as", "default": ["a", 987654, "hunter2-token"]}}}}}"#, ["v.code", "a JSON string", "[1]"]),
            (#"{"groups": {"v": {"properties": {"code": {"type": "b", "value": "hunter2-token"}}}}}"#, ["v.code", "\"value\"", "a boolean"]),
            (#"{"groups": {"v": {"properties": {"pin": {"type": "s", "secret": true, "choices": ["a"], "value": "hunter2-token"}}}}}"#, ["v.pin", "'a'"]),
            (#"{"groups": {"v": {"properties": {"n": {"type": "y", "default": 4242}}}}}"#, ["v.n", "(0…255)"]),
        ]
        for (text, pieces) in cases + [
            // A transform that cannot convert the value says so without quoting it.
            (#"{"groups": {"v": {"properties": {"pin": {"type": "s", "secret": true, "default": "hunter2-token"}, "n": {"type": "i"}}}}, "bindings": [{"key": "v.n", "to": "v.pin", "direction": "from", "to_key": "int(value)"}]}"#,
             ["bindings[0]", "v.n", "'i'"]),
            (#"{"groups": {"v": {"properties": {"pin": {"type": "s", "secret": true, "default": "hunter2-token"}, "n": {"type": "o"}}}}, "bindings": [{"key": "v.n", "to": "v.pin", "direction": "from"}]}"#,
             ["bindings[0]", "v.n", "'o'"]),
        ] {
            guard let message = applyError(text) else { XCTFail("accepted: \(text)"); continue }
            XCTAssertFalse(message.contains("hunter2") || message.contains("4242") || message.contains("987654"), message)
            for piece in pieces + ["test.json:", "value refused"] { XCTAssertTrue(message.contains(piece), "\(message) lacks \(piece)") }
        }
    }

    func testANULInAnyTextFieldIsRefusedNamingTheField() {
        let declarations = [
            "description": #"{"groups": {"p": {"properties": {"k": {"type": "i", "description": "x\u0000y"}}}}}"#,
            "writers": #"{"groups": {"p": {"properties": {"k": {"type": "i", "writers": ["nobody\u0000zzz"]}}}}}"#,
            "command description": #"{"groups": {"c": {"commands": {"run": {"exec": ["/bin/echo"], "description": "x\u0000y"}}}}}"#,
            "exec": #"{"groups": {"c": {"commands": {"run": {"exec": ["/bin/echo", "x\u0000y"]}}}}}"#,
            "exec program": #"{"groups": {"c": {"commands": {"run": {"exec": ["/bin/echo\u0000x"]}}}}}"#,
            "enabled_when": #"{"groups": {"c": {"commands": {"run": {"exec": ["/bin/true"], "enabled_when": "'x\u0000y' == 'x'"}}}}}"#,
            "command writers": #"{"groups": {"c": {"commands": {"run": {"exec": ["/bin/true"], "writers": ["nobody\u0000zzz"]}}}}}"#,
            "to_target": #"{"groups": {"a": {"properties": {"b": {"type": "s"}, "c": {"type": "s"}}}}, "bindings": [{"key": "a.b", "to": "a.c", "to_target": "value + '\u0000'"}]}"#,
            "file description": #"{"description": "x\u0000y", "groups": {}}"#,
        ]
        for (field, text) in declarations {
            guard let message = applyError(text) else { XCTFail("\(field): a NUL was accepted"); continue }
            XCTAssertTrue(message.hasPrefix("test.json:") && message.contains("NUL"), "\(field): \(message)")
        }
        // Bytes may hold a NUL, written as numbers; an escaped backslash is not an escape.
        XCTAssertNil(applyError(#"{"groups": {"p": {"properties": {"k": {"type": "ay", "default": [120, 0, 121]}}}}}"#))
        XCTAssertNil(applyError(#"{"groups": {"p": {"properties": {"k": {"type": "s", "default": "x\\u0000y"}}}}}"#))
        let located = applyError("{\"groups\": {\"p\": {\"properties\": {\"k\": {\"type\": \"s\", \"default\": \"x\\\\u0000\",\n \"description\": \"x\\u0000y\"}}}}}")
        XCTAssertTrue(located?.hasPrefix("test.json:2:19: groups.p.properties.k.description: ") ?? false, located ?? "accepted")
    }

    func testOnlyARegularFileOfBoundedSizeIsReadAndAnythingElseUnread() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("modelfile-special-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let fifo = directory.appendingPathComponent("fifo.json").path
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        let zero = directory.appendingPathComponent("zero.json").path
        try FileManager.default.createSymbolicLink(atPath: zero, withDestinationPath: "/dev/zero")
        let folder = directory.appendingPathComponent("folder.json").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false)
        for (path, kind) in [(fifo, "a FIFO"), (zero, "a character device"), (folder, "a directory")] {
            XCTAssertThrowsError(try ModelFile(contentsOf: path)) { error in
                XCTAssertEqual((error as? PropBusError)?.message, "\(path): cannot read the model file: it is \(kind), not a regular file")
            }
        }
        let big = directory.appendingPathComponent("big.json").path
        let text = #"{"description": "\#(String(repeating: "d", count: 100))", "groups": {}}"#
        try text.write(toFile: big, atomically: true, encoding: .utf8)
        XCTAssertNoThrow(try ModelFile(contentsOf: big, maximumSize: text.utf8.count))
        XCTAssertThrowsError(try ModelFile(contentsOf: big, maximumSize: 100)) { error in
            XCTAssertEqual((error as? PropBusError)?.code, .limitsExceeded)
            XCTAssertEqual((error as? PropBusError)?.message,
                           "\(big): cannot read the model file: it is \(text.utf8.count) bytes; the limit is 100 bytes (propbusd --max-model-file-size)")
        }
    }

    func testALoadIsOneRoundAndARolledBackLoadLeavesNothingOfItself() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("modelfile-round-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let a = directory.appendingPathComponent("a.json").path, b = directory.appendingPathComponent("b.json").path
        func declare(_ aDefault: Int, extra: String = "", command: String = "run") throws {
            try #"{"groups": {"a": {"properties": {"x": {"type": "i", "default": \#(aDefault)}, "y": {"type": "i"}, "w": {"type": "i"}\#(extra)}}}, "bindings": [{"key": "a.y", "to": "a.w"}]}"#
                .write(toFile: a, atomically: true, encoding: .utf8)
            try #"{"groups": {"c": {"commands": {"\#(command)": {"exec": ["/bin/true"]}}}}}"#.write(toFile: b, atomically: true, encoding: .utf8)
        }
        let store = MemoryStore()
        let model = try PropertyModel(store: store)
        let commands = CommandTable(model: model)
        let round = Round(model: model, commands: commands, store: store)
        let files = ModelFileSet()
        try declare(1)
        _ = try files.load([a, b], into: model, commands: commands, strict: false)
        XCTAssertNil(round.end())

        // Both files change; the store refuses the round.
        try declare(2, extra: #", "z": {"type": "s"}"#, command: "go")
        _ = try files.load([a, b], into: model, commands: commands, strict: false)
        round.rollback(because: PropBusError(.storeFailed, "disk full"))
        files.rollbackLoad()
        XCTAssertEqual(try model.value(of: "a.x"), .int32(1))
        XCTAssertNil(model.entry(for: try Key("a.z")))
        XCTAssertEqual(commands.definitions.map(\.key.text), ["c.run"])
        XCTAssertEqual(model.bindings.all.count, 1)

        // The next load applies all, and unmakes the file's binding before making it again.
        _ = try files.load([a, b], into: model, commands: commands, strict: false)
        XCTAssertNil(round.end())
        XCTAssertEqual(try model.value(of: "a.x"), .int32(2))
        XCTAssertNotNil(model.entry(for: try Key("a.z")))
        XCTAssertEqual(commands.definitions.map(\.key.text), ["c.go"])
        XCTAssertEqual(model.bindings.all.count, 1)
    }
}

