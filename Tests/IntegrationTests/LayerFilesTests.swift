import DBus
import Foundation
import XCTest

/// Layer files under `--config-dir` (`mandatory.d/`, `defaults.d/`) and
/// `--vendor-dir` (`defaults.d/`), the locks mandatory files put on keys, and where a value comes
/// from, on a system-like bus with access checks: the writer locked out is `nobody`.
final class LayerLockTests: AccessControlTestCase, @unchecked Sendable {
    static let locked = PropBusAPI.error("Locked")

    override var daemonArguments: [String] { ["--system-access"] + layerDirectoryArguments }

    func describeField(_ key: String, _ field: String) async throws -> String {
        let result = try await propctlLayers(["describe", key, "--field", field])
        XCTAssertTrue(result.succeeded, "\(result)")
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// `settings.volume` (i, default 50), writable by nobody (and the group nogroup) otherwise.
    func createVolume() async throws {
        try await client.create("settings.volume", "i", default: .int32(50),
                                options: ["writers": .variant(.array(of: .string, [.string("nobody"), .string("@nogroup")]))])
    }

    func testSiteDefaultUserValueLockAndUnlockEachWithOneSignal() async throws {
        try await createVolume()
        let site = try writeLayerFile(configDirectory, "defaults.d", "10-site.json", #"{"settings.volume": 30}"#)
        let first = try await propctlLayers(["reload"])
        XCTAssertTrue(first.succeeded, "\(first)")
        let siteValue = try await client.get("settings.volume")
        XCTAssertEqual(siteValue, .int32(30))
        let layer = try await describeField("settings.volume", "layer")
        XCTAssertEqual(layer, "site")
        let siteSource = try await describeField("settings.volume", "layer_source")
        XCTAssertEqual(siteSource, site)

        try await client.set("settings.volume", .int32(55))
        let changes = try await client.recordChanges(ofGroup: "settings")
        let locks = try await client.record(path: PropBusAPI.rootPath, interface: PropBusAPI.manager, member: "LocksChanged")
        let lock = try writeLayerFile(configDirectory, "mandatory.d", "10-lock.json", #"{"settings.volume": 20}"#)
        let reload = try await propctlLayers(["reload"])
        XCTAssertTrue(reload.succeeded, "\(reload)")
        try await client.barrier()
        XCTAssertEqual(changes.signals.map(\.changed), [["volume": .int32(20)]], "one PropertiesChanged to 20: \(changes.signals)")
        XCTAssertEqual(locks.signals.map(\.arguments), [[.array(of: .string, [.string("settings.volume")])]], "writability changed: \(locks.signals)")
        let lockedValue = try await client.get("settings.volume")
        XCTAssertEqual(lockedValue, .int32(20))
        let isLocked = try await describeField("settings.volume", "locked")
        XCTAssertEqual(isLocked, "true")
        let lockSource = try await describeField("settings.volume", "layer_source")
        XCTAssertEqual(lockSource, lock)
        let userValue = try await describeField("settings.volume", "user_value")
        XCTAssertEqual(userValue, "55")

        // nobody may write the key, but not while it is locked; the error names the file.
        let refused = try await setAsNobody("settings.volume", "56")
        XCTAssertFalse(refused.succeeded, "\(refused)")
        XCTAssertTrue(refused.stderr.contains(Self.locked), "\(refused)")
        XCTAssertTrue(refused.stderr.contains("settings.volume") && refused.stderr.contains(lock), "\(refused)")
        let cli = try await propctlAsNobody(["set", "settings.volume", "57"])
        XCTAssertFalse(cli.succeeded, "\(cli)")
        XCTAssertTrue(cli.stderr.contains(lock), "\(cli)")
        // Introspection and the metadata tell nobody the truth: not writable.
        let introspection = try await gdbusAsNobody("/org/propbus/PropBus1/settings", "org.freedesktop.DBus.Introspectable.Introspect", [])
        XCTAssertTrue(introspection.stdout.contains(#"<property name=\"volume\" type=\"i\" access=\"read\""#)
                      || introspection.stdout.contains(#"<property name="volume" type="i" access="read""#), "\(introspection)")
        let listed = try await propctlAsNobody(["describe", "settings.volume", "--field", "writable"])
        XCTAssertEqual(listed.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "false", "\(listed)")

        let before = changes.signals.count
        try FileManager.default.removeItem(atPath: lock)
        let unlock = try await propctlLayers(["reload"])
        XCTAssertTrue(unlock.succeeded, "\(unlock)")
        try await client.barrier()
        XCTAssertEqual(changes.signals.dropFirst(before).map(\.changed), [["volume": .int32(55)]], "one PropertiesChanged back to 55: \(changes.signals)")
        let back = try await client.get("settings.volume")
        XCTAssertEqual(back, .int32(55))
        let writable = try await setAsNobody("settings.volume", "58")
        assertSucceeded(writable)
        XCTAssertEqual(locks.signals.count, 2, "the lock went: \(locks.signals)")
        // History tells which file did what.
        let history = try await propctlLayers(["history", "settings.volume"])
        XCTAssertTrue(history.stdout.contains("layer file \(lock)") && history.stdout.contains("layer file \(site)"), "\(history)")
    }

    func testALockForAGroupRefusesItsMembersAndLetsRootWrite() async throws {
        try await createVolume()
        let lock = try writeLayerFile(configDirectory, "mandatory.d", "20-students.json",
                                      #"{"settings.volume": {"value": 20, "for": ["@nogroup"]}}"#)
        let reload = try await propctlLayers(["reload"])
        XCTAssertTrue(reload.succeeded, "\(reload)")
        let refused = try await setAsNobody("settings.volume", "40")
        XCTAssertTrue(refused.stderr.contains(Self.locked) && refused.stderr.contains(lock), "\(refused)")
        // Root is not in the list: its write is accepted into the user layer, hidden by the lock.
        try await client.set("settings.volume", .int32(44))
        let value = try await client.get("settings.volume")
        XCTAssertEqual(value, .int32(20))
        let userValue = try await describeField("settings.volume", "user_value")
        XCTAssertEqual(userValue, "44")
        let rootWritable = try await describeField("settings.volume", "writable")
        XCTAssertEqual(rootWritable, "true")
        let listed = try await propctlLayers(["list", "--locked"])
        XCTAssertTrue(listed.stdout.contains("settings.volume"), "\(listed)")
    }

    func testALockedChangeArrivesAtAGDBusProxy() async throws {
        try await createVolume()
        let script = #"""
import sys, os
from gi.repository import Gio, GLib
conn = Gio.DBusConnection.new_for_address_sync(sys.argv[1],
    Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION, None, None)
proxy = Gio.DBusProxy.new_sync(conn, Gio.DBusProxyFlags.NONE, None, "org.propbus.PropBus1",
    "/org/propbus/PropBus1/settings", "org.propbus.PropBus1.Values", None)
seen = []
proxy.connect("g-properties-changed", lambda p, changed, invalidated: seen.append(changed.unpack()))
with open(sys.argv[2], "w") as f:
    f.write('{"settings.volume": 20}')
conn.call_sync("org.propbus.PropBus1", "/org/propbus/PropBus1", "org.propbus.PropBus1.Manager", "Reload", None, None, 0, 10000, None)
ctx = GLib.MainContext.default()
deadline = GLib.get_monotonic_time() + 10000000
while not seen and GLib.get_monotonic_time() < deadline:
    ctx.iteration(False)
print(seen, proxy.get_cached_property("volume").unpack())
"""#
        let folder = configDirectory.appendingPathComponent("mandatory.d")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let result = try await tool("/usr/bin/python3", ["-c", script, bus.address, folder.appendingPathComponent("10-lock.json").path], timeout: 60)
        XCTAssertTrue(result.succeeded, "\(result)")
        XCTAssertEqual(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "[{'volume': 20}] 20", "\(result)")
    }
}

/// The layer directories of a test, under its bus's directory, and what writes into them.
extension DaemonTestCase {
    var configDirectory: URL { bus.directory.appendingPathComponent("etc-propbus") }
    var vendorDirectory: URL { bus.directory.appendingPathComponent("usr-share-propbus") }
    var layerDirectoryArguments: [String] { ["--config-dir", configDirectory.path, "--vendor-dir", vendorDirectory.path] }

    /// Writes `text` as `directory/layer/name` (making the directories), returning its path.
    @discardableResult
    func writeLayerFile(_ directory: URL, _ layer: String, _ name: String, _ text: String) throws -> String {
        let folder = directory.appendingPathComponent(layer)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let url = folder.appendingPathComponent(name)
        try text.write(to: url, atomically: true, encoding: .utf8)
        return url.path
    }

    /// `propctl --address <bus> …` as root.
    func propctlLayers(_ arguments: [String]) async throws -> CommandResult {
        try await tool(BuildProducts.propctl, ["--address", bus.address] + arguments, timeout: 15)
    }
}

/// Layer files on a session bus: order, prefixes, keys created later, bad files, `propctl lock`.
final class LayerFilesTests: DaemonTestCase, @unchecked Sendable {
    override var daemonArguments: [String] { layerDirectoryArguments }

    func testVendorSiteAndPrefixEntriesApplyInOrderAndWaitForKeysCreatedLater() async throws {
        try writeLayerFile(vendorDirectory, "defaults.d", "10-vendor.json", #"{"ui.theme": "light", "ui.size": 10}"#)
        try writeLayerFile(configDirectory, "defaults.d", "10-site.json", #"{"ui.*": 12, "ui.theme": "dark"}"#)
        try writeLayerFile(configDirectory, "defaults.d", "20-site.json", #"{"ui.size": 14}"#)
        let reload = try await propctlLayers(["reload"])
        XCTAssertTrue(reload.succeeded, "\(reload)")
        // Created after the files were read: the values waited.
        try await client.create("ui.theme", "s", default: .string("system"))
        try await client.create("ui.size", "i", default: .int32(8))
        try await client.create("ui.zoom", "i", default: .int32(1))
        let theme = try await client.get("ui.theme")
        let size = try await client.get("ui.size")
        let zoom = try await client.get("ui.zoom")
        XCTAssertEqual(theme, .string("dark"), "the site layer is above the vendor's")
        XCTAssertEqual(size, .int32(14), "a later file wins within a layer")
        XCTAssertEqual(zoom, .int32(12), "a prefix entry gives every key under it")
        // Reset goes back to the layers below the user's, not to the definition's default.
        try await client.set("ui.size", .int32(99))
        try await client.reset("ui.size")
        let reset = try await client.get("ui.size")
        XCTAssertEqual(reset, .int32(14))
    }

    func testFilesPresentAtStartApplyAndSIGHUPReadsThemAgain() async throws {
        try writeLayerFile(configDirectory, "mandatory.d", "10-lock.json", #"{"app.volume": 20}"#)
        try writeLayerFile(configDirectory, "defaults.d", "10-site.json", #"{"app.other": 3}"#)
        let model = bus.directory.appendingPathComponent("app.json")
        try #"{"groups": {"app": {"properties": {"volume": {"type": "i", "default": 50}, "other": {"type": "i", "default": 1}}}}}"#
            .write(to: model, atomically: true, encoding: .utf8)
        try await restartDaemon(arguments: daemonArguments + ["--model", model.path])
        let volume = try await client.get("app.volume")
        let other = try await client.get("app.other")
        XCTAssertEqual([volume, other], [.int32(20), .int32(3)])
        let changes = try await client.recordChanges(ofGroup: "app")
        try writeLayerFile(configDirectory, "defaults.d", "10-site.json", #"{"app.other": 4}"#)
        daemon.process.signal(SIGHUP)
        let arrived = await changes.wait { $0.contains { $0.changed["other"] == .int32(4) } }
        XCTAssertEqual(arrived.map(\.changed), [["other": .int32(4)]], "only the value that changed: \(arrived)")
    }

    func testABadLayerFileIsNamedAndTheOthersApply() async throws {
        try await client.create("app.volume", "i", default: .int32(50), options: ["maximum": .variant(.int32(100))])
        try await client.create("app.other", "i", default: .int32(1))
        try writeLayerFile(configDirectory, "defaults.d", "10-good.json", #"{"app.other": 5}"#)
        let badJSON = try writeLayerFile(configDirectory, "defaults.d", "20-bad.json", #"{"app.other": "#)
        let badValue = try writeLayerFile(configDirectory, "mandatory.d", "30-range.json", #"{"app.volume": 500, "app.other": 6}"#)
        let reload = try await propctlLayers(["reload"])
        XCTAssertFalse(reload.succeeded, "\(reload)")
        XCTAssertTrue(reload.stderr.contains(badJSON), "\(reload)")
        XCTAssertTrue(reload.stderr.contains(badValue) && reload.stderr.contains("app.volume") && reload.stderr.contains("100"), "\(reload)")
        let other = try await client.get("app.other")
        XCTAssertEqual(other, .int32(6), "the good entries still apply")
        let volume = try await client.get("app.volume")
        XCTAssertEqual(volume, .int32(50), "the refused entry is skipped")
        let status = try await propctlLayers(["status"])
        XCTAssertTrue(status.stdout.contains(badJSON) && status.stdout.contains(badValue), "\(status)")
        // Logged once per reload, not once per key read.
        _ = try await client.get("app.volume")
        XCTAssertEqual(daemon.stderr.components(separatedBy: badValue).count - 1, 1, daemon.stderr)
    }

    /// A NUL (`\u0000`) in a key, a `for` name or a value of a layer file: D-Bus strings cannot
    /// carry it, so a problem quoting it made `SkippedModelFiles` and `Reload`'s reply fail for
    /// everyone. The file is skipped, named, and the NUL never quoted.
    func testALayerFileWithANULIsSkippedAndNamedWithoutBreakingTheReplies() async throws {
        try await client.create("app.other", "i", default: .int32(1))
        let bad = try writeLayerFile(configDirectory, "mandatory.d", "10-nul.json", #"{"app.x\u0000y": 5, "app.other": {"value": 7, "for": ["nobody\u0000zzz"]}}"#)
        try writeLayerFile(configDirectory, "defaults.d", "20-good.json", #"{"app.other": 5}"#)
        let reload = try await client.call(PropBusAPI.manager, "Reload")
        XCTAssertTrue("\(reload)".contains(bad), "\(reload)")
        let skipped = try await client.call(at: PropBusAPI.rootPath, PropBusAPI.properties, "Get", [.string(PropBusAPI.manager), .string("SkippedModelFiles")])
        XCTAssertTrue("\(skipped)".contains(bad) && "\(skipped)".contains("NUL"), "\(skipped)")
        let status = try await propctlLayers(["status"])
        XCTAssertTrue(status.succeeded && status.stdout.contains(bad), "\(status)")
        let other = try await client.get("app.other")
        XCTAssertEqual(other, .int32(5), "the other file applies, the skipped one does not")
    }

    func testPropctlLockAndUnlockWriteTheMandatoryFileAndReload() async throws {
        try await client.create("app.volume", "i", default: .int32(50))
        let lock = try await propctlLayers(["lock", "app.volume", "20"])
        XCTAssertTrue(lock.succeeded, "\(lock)")
        let file = configDirectory.appendingPathComponent("mandatory.d/50-propctl.json").path
        XCTAssertTrue(FileManager.default.fileExists(atPath: file))
        let value = try await client.get("app.volume")
        XCTAssertEqual(value, .int32(20))
        let listed = try await propctlLayers(["list", "--locked"])
        XCTAssertTrue(listed.stdout.contains("app.volume"), "\(listed)")
        let unlock = try await propctlLayers(["unlock", "app.volume"])
        XCTAssertTrue(unlock.succeeded, "\(unlock)")
        let back = try await client.get("app.volume")
        XCTAssertEqual(back, .int32(50))
        let none = try await propctlLayers(["list", "--locked"])
        XCTAssertFalse(none.stdout.contains("app.volume"), "\(none)")
    }

    func testDescribeOfAKeyReadingASiteDefaultSaysWhichLayerItReads() async throws {
        try await client.create("app.volume", "i", default: .int32(50))
        try writeLayerFile(configDirectory, "defaults.d", "10-site.json", #"{"app.volume": 30}"#)
        let reload = try await propctlLayers(["reload"])
        XCTAssertTrue(reload.succeeded, "\(reload)")
        let describe = try await propctlLayers(["describe", "app.volume"])
        let isSet = describe.stdout.split(separator: "\n").first { $0.hasPrefix("is_set") }.map(String.init) ?? ""
        XCTAssertTrue(isSet.hasSuffix("no (reads the site layer's default)"), "the value is the site's, not the definition's default: \(describe)")
    }

    func testPropctlLockFailsClearlyWhenTheDirectoryIsNotWritable() async throws {
        // A regular file where the directory should be: nobody can create mandatory.d under it.
        try FileManager.default.createDirectory(at: bus.directory.appendingPathComponent("blocked"), withIntermediateDirectories: true)
        let blocker = bus.directory.appendingPathComponent("blocked/file")
        try "".write(to: blocker, atomically: true, encoding: .utf8)
        try await restartDaemon(arguments: ["--config-dir", blocker.path])
        try await client.create("app.volume", "i", default: .int32(50))
        let lock = try await propctlLayers(["lock", "app.volume", "20"])
        XCTAssertFalse(lock.succeeded, "\(lock)")
        XCTAssertTrue(lock.stderr.contains(blocker.path + "/mandatory.d"), "\(lock)")
        XCTAssertFalse(lock.stderr.contains("propctl lock: propctl lock"), "said once: \(lock)")
    }
}
