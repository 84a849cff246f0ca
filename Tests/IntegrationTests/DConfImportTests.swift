import Foundation
import XCTest

/// `propctl import dconf | gschema | dconf-db` and `propctl export dconf`, against dconf itself
/// (dconf-service on a private bus of its own) and a real propbusd.
final class DConfImportTests: DaemonTestCase, @unchecked Sendable {
    private var scratch: URL!
    private var worlds: [DConfWorld] = []

    private var siteDirectory: URL { scratch.appendingPathComponent("config") }
    private var vendorLayerDirectory: URL { scratch.appendingPathComponent("vendor") }

    override var daemonArguments: [String] { ["--config-dir", siteDirectory.path, "--vendor-dir", vendorLayerDirectory.path] }

    override func setUp() async throws {
        scratch = try makeTemporaryDirectory(prefix: "pbit-dci")
        for directory in ["config/mandatory.d", "config/defaults.d", "vendor/defaults.d"] {
            try FileManager.default.createDirectory(at: scratch.appendingPathComponent(directory), withIntermediateDirectories: true)
        }
        try await super.setUp()
    }

    override func tearDown() async throws {
        for world in worlds { await world.stop() }
        worlds = []
        try await super.tearDown()
        try? FileManager.default.removeItem(at: scratch)
    }

    private func startDConf() async throws -> DConfWorld {
        let world = try await DConfWorld.start()
        worlds.append(world)
        return world
    }

    private func propctl(_ arguments: [String], stdin: String? = nil) async throws -> CommandResult {
        try await runCommand(BuildProducts.propctl, ["--address", bus.address] + arguments, environment: bus.environment,
                             stdin: stdin, timeout: 120)
    }

    private func trimmed(_ result: CommandResult) -> String {
        result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// dconf's own dump of a desktop's settings: every installed schema's defaults and a user's
    /// changes of every type, loaded with `dconf load` and dumped with `dconf dump`.
    private func realisticDump(_ dconf: DConfWorld) async throws -> String {
        let groups = try await DConfFixtures.installedSchemaDefaults() + DConfFixtures.userChanges
        let load = try await dconf.dconf(["load", "/"], stdin: DConfFixtures.keyFile(groups))
        XCTAssertTrue(load.succeeded, "\(load)")
        let dump = try await dconf.dconf(["dump", "/"])
        XCTAssertTrue(dump.succeeded, "\(dump)")
        return dump.stdout
    }

    // MARK: dconf dumps

    func testARealisticDumpRoundTripsThroughPropbusIntoAFreshDconf() async throws {
        let original = try await realisticDump(try await startDConf())
        let keyCount = original.split(separator: "\n").filter { $0.contains("=") && !$0.hasPrefix("[") }.count
        XCTAssertGreaterThan(keyCount, 200, "a few hundred keys: \(original.prefix(500))")

        let imported = try await propctl(["import", "dconf", "-"], stdin: original)
        XCTAssertTrue(imported.succeeded, "\(imported)")
        // Types are kept: a uint32 stays a uint32, a maybe takes its D-Bus form.
        for (key, type) in [("org.gnome.settings_daemon.plugins.power.sleep_inactive_ac_timeout", "u"),
                            ("com.example.Types.maybe_just", "a(s)"), ("com.example.Types.uint64", "t"),
                            ("org.gnome.desktop.input_sources.sources", "a(ss)"), ("org.gnome.shell.weather.locations", "av"),
                            ("org.gnome.terminal.legacy._profiles_3a.__3ab1dcc9dd_2d5262_2d4d8d_2da863_2dc897e6d979b9.palette", "as")] {
            let described = try await propctl(["describe", key, "--field", "type"])
            XCTAssertEqual(trimmed(described), type, "\(key): \(described)")
        }
        // One Apply sets the values (a value equal to its new key's default is stored when the
        // key is registered), and every key holds a value of its own, as in dconf.
        let history = try await propctl(["--json", "history", "--since", "@1"])
        let rows = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(history.stdout.utf8)) as? [[String: Any]], "\(history)")
        let applied = rows.filter { ($0["via"] as? String) == "Apply" }
        XCTAssertGreaterThan(applied.count, keyCount / 2, "\(rows.count) rows")
        XCTAssertEqual(Set(applied.compactMap { ($0["change"] as? NSNumber)?.uint64Value }).count, 1, "one change")
        let dump = try await propctl(["--json", "dump"])
        let document = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(dump.stdout.utf8)) as? [String: Any])
        let properties = try XCTUnwrap(document["properties"] as? [String: [String: Any]])
        XCTAssertEqual(properties.count, keyCount)
        XCTAssertEqual(properties.filter { ($0.value["is_set"] as? Bool) != true }.map(\.key), [], "every key is set")

        let exported = try await propctl(["export", "dconf", "/"])
        XCTAssertTrue(exported.succeeded, "\(exported)")
        let fresh = try await startDConf()
        let load = try await fresh.dconf(["load", "/"], stdin: exported.stdout)
        XCTAssertTrue(load.succeeded, "\(load)")
        let again = try await fresh.dconf(["dump", "/"])
        XCTAssertEqual(again.stdout, original, "dconf dump of the export is dconf dump of the original")

        // Importing the same dump again changes nothing.
        let twice = try await propctl(["import", "dconf", "--dry-run", "-"], stdin: original)
        XCTAssertTrue(twice.succeeded, "\(twice)")
        XCTAssertTrue(twice.stdout.contains("0 to set"), "\(twice)")
    }

    func testImportRelativeToADirectoryAsDconfLoadReadsIt() async throws {
        let dconf = try await startDConf()
        _ = try await realisticDump(dconf)
        let part = try await dconf.dconf(["dump", "/org/gnome/desktop/"])
        XCTAssertTrue(part.stdout.hasPrefix("[input-sources]") || part.stdout.contains("\n[interface]\n"), "\(part)")
        let imported = try await propctl(["import", "dconf", "--path", "/org/gnome/desktop/", "-"], stdin: part.stdout)
        XCTAssertTrue(imported.succeeded, "\(imported)")
        let value = try await propctl(["get", "org.gnome.desktop.interface.clock_format"])
        XCTAssertEqual(trimmed(value), "24h", "\(value)")
        let exported = try await propctl(["export", "dconf", "/org/gnome/desktop/"])
        XCTAssertEqual(exported.stdout, part.stdout)
    }

    func testAnImportIsAllOrNothingAndDryRunChangesNothing() async throws {
        try await client.create("org.example.app.count", "i", default: .int32(1))
        let dump = """
        [org/example/app]
        name='app'
        count='not a number'

        [org/example/other]
        flag=true
        """
        let refused = try await propctl(["import", "dconf", "-"], stdin: dump)
        XCTAssertEqual(refused.status, 1, "\(refused)")
        XCTAssertTrue(refused.stderr.contains("/org/example/app/count") && refused.stderr.contains("'i'") && refused.stderr.contains("'s'"), "names the key and both types: \(refused)")
        let listed = try await propctl(["list", "--names"])
        XCTAssertEqual(trimmed(listed), "org.example.app.count", "nothing was created: \(listed)")

        let fixed = dump.replacingOccurrences(of: "count='not a number'", with: "count=5")
        let dryRun = try await propctl(["import", "dconf", "--dry-run", "-"], stdin: fixed)
        XCTAssertTrue(dryRun.succeeded, "\(dryRun)")
        XCTAssertTrue(dryRun.stdout.contains("create org.example.app.name s") && dryRun.stdout.contains("set org.example.app.count 1 -> 5"), "\(dryRun)")
        let still = try await propctl(["list", "--names"])
        XCTAssertEqual(trimmed(still), "org.example.app.count", "\(still)")
        let done = try await propctl(["import", "dconf", "-"], stdin: fixed)
        XCTAssertTrue(done.succeeded, "\(done)")
        let flag = try await propctl(["get", "org.example.other.flag"])
        XCTAssertEqual(trimmed(flag), "true", "\(flag)")
    }

    // MARK: Schemas

    func testImportGschemaMakesDefinitionsAndOverridesTheVendorLayer() async throws {
        let schemas = scratch.appendingPathComponent("schemas")
        try FileManager.default.createDirectory(at: schemas, withIntermediateDirectories: true)
        try GSettingsWorld.schemaXML.write(to: schemas.appendingPathComponent("org.propbus.gstest.gschema.xml"), atomically: true, encoding: .utf8)
        try "[org.propbus.gstest]\ngreeting='Hello from the vendor'\ncount=7\n"
            .write(to: schemas.appendingPathComponent("10_vendor.gschema.override"), atomically: true, encoding: .utf8)
        let dryRun = try await propctl(["import", "gschema", "--vendor-dir", vendorLayerDirectory.path, "--dry-run", schemas.path])
        XCTAssertTrue(dryRun.succeeded, "\(dryRun)")
        let none = try await propctl(["list", "--names"])
        XCTAssertEqual(trimmed(none), "", "a dry run creates nothing: \(none)")

        let imported = try await propctl(["import", "gschema", "--vendor-dir", vendorLayerDirectory.path, schemas.path])
        XCTAssertTrue(imported.succeeded, "\(imported)")
        XCTAssertTrue(imported.stderr.contains("org.propbus.gstest.profile") && imported.stderr.contains("relocatable"), "\(imported)")
        func field(_ key: String, _ name: String) async throws -> String {
            trimmed(try await propctl(["describe", "org.propbus.gstest." + key, "--field", name]))
        }
        let fontDescription = try await field("font_name", "description")
        XCTAssertEqual(fontDescription, "The interface font")
        let fontDefault = try await field("font_name", "default")
        XCTAssertEqual(fontDefault, "Cantarell 11")
        let countRange = try await field("count", "range")
        XCTAssertTrue(countRange.contains("0") && countRange.contains("100"), countRange)
        let colourChoices = try await field("colour", "choices")
        XCTAssertTrue(colourChoices.contains("red") && colourChoices.contains("blue"), colourChoices)
        let maybeType = try await field("maybe_name", "type")
        XCTAssertEqual(maybeType, "a(s)")
        let childType = try await field("child.depth", "type")
        XCTAssertEqual(childType, "i")
        // The override file's values are the vendor layer's.
        let greetingLayer = try await field("greeting", "layer")
        XCTAssertEqual(greetingLayer, "vendor")
        let greeting = try await propctl(["get", "org.propbus.gstest.greeting"])
        XCTAssertEqual(trimmed(greeting), "Hello from the vendor", "\(greeting)")
        // An enum's other values are refused by propbusd itself.
        let refused = try await propctl(["set", "org.propbus.gstest.colour", "purple"])
        XCTAssertFalse(refused.succeeded, "\(refused)")
        // Importing again changes nothing and succeeds.
        let again = try await propctl(["import", "gschema", "--vendor-dir", vendorLayerDirectory.path, schemas.path])
        XCTAssertTrue(again.succeeded, "\(again)")
    }

    // MARK: dconf's system databases

    func testImportDconfDbMakesSiteDefaultsAndMandatoryLocks() async throws {
        let database = scratch.appendingPathComponent("local.d")
        try FileManager.default.createDirectory(at: database.appendingPathComponent("locks"), withIntermediateDirectories: true)
        try """
        # Site defaults
        [org/gnome/desktop/background]
        picture-uri='file:///usr/share/backgrounds/site.jpg'

        [org/gnome/desktop/screensaver]
        lock-enabled=true
        lock-delay=uint32 30
        """.write(to: database.appendingPathComponent("00-site"), atomically: true, encoding: .utf8)
        try "# locked for everyone\n/org/gnome/desktop/screensaver/lock-enabled\n/org/gnome/desktop/screensaver/lock-delay\n"
            .write(to: database.appendingPathComponent("locks/screensaver"), atomically: true, encoding: .utf8)

        let imported = try await propctl(["import", "dconf-db", database.path])
        XCTAssertTrue(imported.succeeded, "\(imported)")
        let layer = try await propctl(["describe", "org.gnome.desktop.background.picture_uri", "--field", "layer"])
        XCTAssertEqual(trimmed(layer), "site", "\(layer)")
        let value = try await propctl(["get", "org.gnome.desktop.background.picture_uri"])
        XCTAssertEqual(trimmed(value), "file:///usr/share/backgrounds/site.jpg", "\(value)")
        for key in ["lock_enabled", "lock_delay"] {
            let locked = try await propctl(["describe", "org.gnome.desktop.screensaver." + key, "--field", "locked"])
            XCTAssertEqual(trimmed(locked), "true", "\(key): \(locked)")
        }
        let delayType = try await propctl(["describe", "org.gnome.desktop.screensaver.lock_delay", "--field", "type"])
        XCTAssertEqual(trimmed(delayType), "u", "\(delayType)")
        // A user's value stays below the site default's key, above it: the site default shows
        // only while the user has none.
        let set = try await propctl(["set", "org.gnome.desktop.background.picture_uri", "file:///mine.jpg"])
        XCTAssertTrue(set.succeeded, "\(set)")
        let mine = try await propctl(["get", "org.gnome.desktop.background.picture_uri"])
        XCTAssertEqual(trimmed(mine), "file:///mine.jpg", "\(mine)")
        // Files in the config directory, named after the database.
        XCTAssertTrue(FileManager.default.fileExists(atPath: siteDirectory.appendingPathComponent("defaults.d/50-dconf-local.json").path))
        XCTAssertTrue(FileManager.default.fileExists(atPath: siteDirectory.appendingPathComponent("mandatory.d/50-dconf-local.json").path))
    }
}
