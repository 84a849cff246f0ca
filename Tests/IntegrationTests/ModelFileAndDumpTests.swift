import DBus
import Foundation
import XCTest

/// Model files (docs/model-files.md) and propctl dump/load, through the real binaries.
final class ModelFileAndDumpTests: DaemonTestCase, @unchecked Sendable {
    private var example: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("examples/flickr-search.json").path
    }

    private func propctl(_ arguments: [String], stdin: String? = nil) async throws -> CommandResult {
        try await runCommand(BuildProducts.propctl, ["--address", bus.address] + arguments, environment: bus.environment,
                             stdin: stdin, timeout: 10)
    }

    private func write(_ text: String, to name: String) throws -> String {
        let path = bus.directory.appendingPathComponent(name).path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    func testExampleModelLoadsAndItsValuesPersistAcrossRestarts() async throws {
        try await restartDaemon(arguments: ["--model", example])
        let title = try await client.get("viewmodel.title")
        XCTAssertEqual(title, .string("Flickr Search"))
        await assertDBusError(PropBusAPI.standard("PropertyReadOnly"), containing: ["viewmodel.title"]) {
            try await self.client.set("viewmodel.title", .string("Other"))
        }
        try await client.set("settings.someBoolKey", .boolean(true))
        try await client.set("viewmodel.searchText", .string("kittens"))
        try await restartDaemon(arguments: ["--model", example])
        let setting = try await client.get("settings.someBoolKey")
        XCTAssertEqual(setting, .boolean(true), "a declared property keeps its stored value when declared again")
        let search = try await client.get("viewmodel.searchText")
        XCTAssertEqual(search, .string(""), "searchText is transient")
    }

    func testModelFilesInTheConfigDirectoryAreRead() async throws {
        let directory = bus.environment["XDG_CONFIG_HOME"].map { $0 + "/propbus/models" }
        let models = try XCTUnwrap(directory, "the fixture sets XDG_CONFIG_HOME")
        try FileManager.default.createDirectory(atPath: models, withIntermediateDirectories: true)
        try #"{"groups": {"cfg": {"properties": {"x": {"type": "i", "default": 7}}}}}"#.write(toFile: models + "/a.json", atomically: true, encoding: .utf8)
        try await restartDaemon(arguments: [])
        let value = try await client.get("cfg.x")
        XCTAssertEqual(value, .int32(7))
    }

    func testBadModelFilesStopTheDaemonNamingTheFile() async throws {
        await daemon.stop()
        let cases = [
            ("bad-type.json", #"{"groups": {"a": {"properties": {"b": {"type": "zz"}}}}}"#, ["a.b", "zz"]),
            ("bad-json.json", #"{"groups": "#, ["invalid JSON"]),
        ]
        for (name, text, fragments) in cases {
            let path = try write(text, to: name)
            let result = try await runCommand(BuildProducts.propbusd, ["--address", bus.address, "--model", path],
                                              environment: bus.environment, timeout: 10)
            XCTAssertNotEqual(result.status, 0, name)
            XCTAssertTrue(result.stderr.contains(path), "\(name): \(result.stderr)")
            for fragment in fragments { XCTAssertTrue(result.stderr.contains(fragment), "\(name): \(result.stderr)") }
        }
        daemon = try await Daemon.start(on: bus, watcher: client)
    }

    func testDumpThenLoadRoundTrips() async throws {
        try await client.create("d.flag", "b", default: .boolean(false))
        try await client.create("d.tags", "as", default: .array(of: .string, []))
        try await client.create("d.opts", "a{sv}", default: .vardict([:]))
        try await client.create("d.name", "s", default: .string("default"))
        try await client.set("d.flag", .boolean(true))
        try await client.set("d.tags", .array(of: .string, [.string("a"), .string("b")]))
        try await client.set("d.opts", .vardict(["k": .int64(1), "s": .string("x")]))
        let dump = try await propctl(["dump", "d"])
        XCTAssertEqual(dump.status, 0, dump.stderr)
        let document = try JSONSerialization.jsonObject(with: Data(dump.stdout.utf8)) as? [String: Any]
        let properties = try XCTUnwrap(document?["properties"] as? [String: Any])
        XCTAssertEqual(Set(properties.keys), ["d.flag", "d.tags", "d.opts", "d.name"])

        try await client.set("d.flag", .boolean(false))
        try await client.set("d.tags", .array(of: .string, []))
        try await client.set("d.name", .string("changed"))
        let path = try write(dump.stdout, to: "dump.json")
        let load = try await propctl(["load", path])
        XCTAssertEqual(load.status, 0, load.stderr)
        let flag = try await client.get("d.flag")
        XCTAssertEqual(flag, .boolean(true))
        let tags = try await client.get("d.tags")
        XCTAssertEqual(tags, .array(of: .string, [.string("a"), .string("b")]))
        let name = try await client.list(prefix: "d.name").first
        XCTAssertEqual(name?.value, .string("default"))
        XCTAssertEqual(name?.metadata["is_set"], .boolean(false), "a key dumped at its default is reset")

        let again = try await propctl(["load", "-"], stdin: dump.stdout)
        XCTAssertEqual(again.status, 0, "loading what is already there changes nothing: \(again.stderr)")
    }

    func testLoadOfAFileThatCannotBeReadSaysWhyAndExits64() async throws {
        let missing = bus.directory.appendingPathComponent("missing.json").path
        let load = try await propctl(["load", missing])
        XCTAssertEqual(load.status, 64, "\(load)")
        XCTAssertEqual(load.stderr, "propctl load: cannot read \(missing): No such file or directory\n")
        let fromStdin = try await propctl(["load", "-"], stdin: #"{"properties": {}}"#)
        XCTAssertEqual(fromStdin.status, 0, "\(fromStdin)")
    }

    func testLoadWithOneBadValueChangesNothingAndNamesTheKey() async throws {
        try await client.create("l.a", "i", default: .int32(1))
        _ = try await client.call(PropBusAPI.manager, "CreateProperty",
                                  [.string("l.b"), .string("i"), .variant(.int32(1)), .vardict(["maximum": .int32(10)])])
        let path = try write(#"{"properties": {"l.a": {"type": "i", "value": 5}, "l.b": {"type": "i", "value": 50}}}"#, to: "bad.json")
        let load = try await propctl(["load", path])
        XCTAssertEqual(load.status, 1)
        XCTAssertTrue(load.stderr.contains("OutOfRange") && load.stderr.contains("l.b"), load.stderr)
        let a = try await client.get("l.a")
        XCTAssertEqual(a, .int32(1), "Apply is atomic: the valid value was not applied either")

        let typo = try write(#"{"properties": {"l.a": {"type": "i", "value": "five"}}}"#, to: "typo.json")
        let refused = try await propctl(["load", typo])
        XCTAssertEqual(refused.status, 1, "a bad value exits 1, like one the daemon refuses")
        XCTAssertTrue(refused.stderr.contains("l.a"), refused.stderr)
    }
}

/// A dump of a group that holds a command loads back once the command's state changed:
/// the state keys are the command's, never the file's to set.
final class DumpOfACommandGroupTests: DaemonTestCase, @unchecked Sendable {
    func testADumpOfAGroupHoldingACommandLoadsBackAfterItsStateChanged() async throws {
        try await client.create("job.level", "i", default: .int32(1))
        try await client.call(PropBusAPI.manager, "CreateCommand",
                              [.string("job.run"), .vardict(["exec": .array(of: .string, [.string("/bin/echo"), .string("done")])])])
        let dump = try await runCommand(BuildProducts.propctl, ["--address", bus.address, "dump", "job", "--definitions"],
                                        environment: bus.environment, timeout: 10)
        XCTAssertEqual(dump.status, 0, dump.stderr)
        _ = try await client.call(at: "/org/propbus/PropBus1/job/run", "org.propbus.PropBus1.Command", "Execute", [.variant(.string(""))])
        try await client.set("job.level", .int32(5))
        let load = try await runCommand(BuildProducts.propctl, ["--address", bus.address, "load", "-"],
                                        environment: bus.environment, stdin: dump.stdout, timeout: 10)
        XCTAssertEqual(load.status, 0, "\(load)")
        let level = try await client.get("job.level")
        XCTAssertEqual(level, .int32(1))
    }
}

/// A backup is whole: `dump --definitions` carries the persistent bindings and the
/// commands of what it dumps, `load --create` makes them again, and `delete` says which
/// bindings end with the key.
final class WholeBackupTests: DaemonTestCase, @unchecked Sendable {
    private func propctl(_ arguments: [String], stdin: String? = nil) async throws -> CommandResult {
        try await runCommand(BuildProducts.propctl, ["--address", bus.address] + arguments, environment: bus.environment,
                             stdin: stdin, timeout: 15)
    }

    func testTheReadmesBackupSequenceKeepsThePersistentBindingAndTheCommand() async throws {
        try await client.create("model.valueB", "s", default: .string("0"))
        try await client.create("ui.valueA", "s", default: .string("Off"))
        let bound = try await propctl(["bind", "ui.valueA", "--to", "model.valueB", "--persist",
                                       "--map", #"value == "1" ? "On" : "Off""#, "--unmap", #"value == "On" ? "1" : "0""#])
        XCTAssertEqual(bound.status, 0, "\(bound)")
        let made = try await propctl(["create-command", "ui.refresh", "--", "/bin/echo", "refreshed"])
        XCTAssertEqual(made.status, 0, "\(made)")
        for format in ["json", "lines"] {
            let dump = try await propctl(["dump", "--definitions", "--format", format, "ui"])
            XCTAssertEqual(dump.status, 0, "\(dump)")
            let deleted = try await propctl(["delete", "ui.valueA"])
            XCTAssertEqual(deleted.status, 0, "\(deleted)")
            XCTAssertTrue(deleted.stderr.contains("ends the binding") && deleted.stderr.contains("ui.valueA") && deleted.stderr.contains("model.valueB"),
                          "delete says which binding ends: \(deleted)")
            _ = try await propctl(["delete-command", "ui.refresh"])
            let load = try await propctl(["load", "--create", "-"], stdin: dump.stdout)
            XCTAssertEqual(load.status, 0, "\(format): \(load)")
            try await client.set("model.valueB", .string("1"))
            let followed = try await client.get("ui.valueA")
            XCTAssertEqual(followed, .string("On"), "\(format): the binding came back with the key")
            try await client.set("model.valueB", .string("0"))
            let run = try await propctl(["exec", "ui.refresh"])
            XCTAssertEqual(run.stdout, "refreshed\n", "\(format): the command came back: \(run)")
            let again = try await propctl(["load", "--create", "-"], stdin: dump.stdout)
            XCTAssertEqual(again.status, 0, "loading it twice changes nothing: \(again)")
            let bindings = try await propctl(["--json", "bindings"])
            XCTAssertEqual(bindings.stdout.components(separatedBy: "\"path\"").count - 1, 1, "one binding, not two: \(bindings)")
        }
    }
}
