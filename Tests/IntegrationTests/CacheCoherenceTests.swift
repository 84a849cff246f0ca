import DBus
import Foundation
import XCTest

/// Clients' caches stay true. GDBus proxies and ObjectManager clients forget a
/// property only when it is listed in `invalidated_properties`; generic clients use only the
/// standard names.
final class CacheCoherenceTests: DaemonTestCase, @unchecked Sendable {
    /// The proxy scripts' start: a GDBus connection to the bus in argv[1], and `call`.
    private static let pythonPrelude = #"""
import sys
from gi.repository import Gio, GLib
address = sys.argv[1]
conn = Gio.DBusConnection.new_for_address_sync(address,
    Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION, None, None)
NAME, ROOT = "org.propbus.PropBus1", "/org/propbus/PropBus1"
def call(path, iface, method, sig, args):
    return conn.call_sync(NAME, path, iface, method, GLib.Variant(sig, args) if sig else None, None, 0, 5000, None)

"""#

    /// A GDBusProxy on group `app`, driven through creates, sets and deletes; after every step
    /// (and a barrier write whose change the proxy must have seen) its cache is compared with
    /// `GetAll`. Prints one line per diverging step.
    private static let proxyScript = pythonPrelude + #"""
def create(key, default):
    call(ROOT, "org.propbus.PropBus1.Manager", "CreateProperty", "(ssva{sv})", (key, "i", GLib.Variant("i", default), {}))
def delete(key):
    call(ROOT, "org.propbus.PropBus1.Manager", "DeleteProperty", "(s)", (key,))
def set_(name, value):
    call(ROOT + "/app", "org.freedesktop.DBus.Properties", "Set", "(ssv)", ("org.propbus.PropBus1.Values", name, GLib.Variant("i", value)))
create("app.marker", 0)
proxy = Gio.DBusProxy.new_sync(conn, Gio.DBusProxyFlags.NONE, None, NAME, ROOT + "/app", "org.propbus.PropBus1.Values", None)
ctx = GLib.MainContext.default()
marker = [0]
def barrier():
    marker[0] += 1
    set_("marker", marker[0])
    deadline = GLib.get_monotonic_time() + 5000000
    while GLib.get_monotonic_time() < deadline:
        v = proxy.get_cached_property("marker")
        if v is not None and v.unpack() == marker[0]:
            return
        ctx.iteration(False)
    print("barrier timed out")
def check(step):
    barrier()
    truth = call(ROOT + "/app", "org.freedesktop.DBus.Properties", "GetAll", "(s)", ("org.propbus.PropBus1.Values",)).unpack()[0]
    cached = {n: proxy.get_cached_property(n).unpack() for n in proxy.get_cached_property_names()}
    if cached != truth:
        print("step %s: cache %s, bus %s" % (step, sorted(cached.items()), sorted(truth.items())))
steps = [
    ("create a", lambda: create("app.a", 1)), ("create b", lambda: create("app.b", 2)),
    ("set a", lambda: set_("a", 10)), ("delete a", lambda: delete("app.a")),
    ("set b", lambda: set_("b", 20)), ("create a again", lambda: create("app.a", 3)),
    ("delete b", lambda: delete("app.b")), ("delete a", lambda: delete("app.a")),
]
for name, action in steps:
    action()
    check(name)
print("done")
"""#

    /// Proxies made before their object exists: a plain GDBusProxy listens to
    /// PropertiesChanged on its own path only, not to the root's InterfacesAdded/Removed. A
    /// barrier on another object (signals of one sender arrive in order) shows each step landed.
    private static let earlyProxyScript = pythonPrelude + #"""
def manager(method, sig, args):
    call(ROOT, "org.propbus.PropBus1.Manager", method, sig, args)
manager("CreateProperty", "(ssva{sv})", ("mark.n", "i", GLib.Variant("i", 0), {}))
def proxy(path, iface):
    return Gio.DBusProxy.new_sync(conn, Gio.DBusProxyFlags.NONE, None, NAME, ROOT + path, iface, None)
marker, fresh, job = proxy("/mark", "org.propbus.PropBus1.Values"), proxy("/fresh", "org.propbus.PropBus1.Values"), proxy("/jobs/run", "org.propbus.PropBus1.Command")
ctx, count = GLib.MainContext.default(), [0]
def barrier():
    count[0] += 1
    call(ROOT + "/mark", "org.freedesktop.DBus.Properties", "Set", "(ssv)", ("org.propbus.PropBus1.Values", "n", GLib.Variant("i", count[0])))
    deadline = GLib.get_monotonic_time() + 5000000
    while GLib.get_monotonic_time() < deadline:
        v = marker.get_cached_property("n")
        if v is not None and v.unpack() == count[0]:
            return
        ctx.iteration(False)
    print("barrier timed out")
def cached(p):
    return {n: p.get_cached_property(n).unpack() for n in p.get_cached_property_names()}
def check(step, p, expected):
    barrier()
    if cached(p) != expected:
        print("step %s: cache %s, expected %s" % (step, sorted(cached(p).items()), sorted(expected.items())))
manager("CreateProperty", "(ssva{sv})", ("fresh.a", "i", GLib.Variant("i", 1), {}))
check("first key of a new group", fresh, {"a": 1})
manager("DeleteProperty", "(s)", ("fresh.a",))
check("last key deleted", fresh, {})
manager("CreateProperty", "(ssva{sv})", ("fresh.b", "i", GLib.Variant("i", 2), {}))
check("the group back with another key", fresh, {"b": 2})
manager("CreateCommand", "(sa{sv})", ("jobs.run", {"exec": GLib.Variant("as", ["/bin/true"])}))
barrier()
if cached(job).get("Enabled") is not True or "Executing" not in cached(job):
    print("step command created: cache %s" % sorted(cached(job).items()))
manager("DeleteCommand", "(s)", ("jobs.run",))
check("command deleted", job, {})
print("done")
"""#

    func testGDBusProxiesMadeBeforeTheirObjectFollowItsLife() async throws {
        let result = try await tool("/usr/bin/python3", ["-c", Self.earlyProxyScript, bus.address], timeout: 60)
        XCTAssertTrue(result.succeeded, "\(result)")
        XCTAssertEqual(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "done", "diverging steps:\n\(result.stdout)\n\(result.stderr)")
    }

    func testGDBusProxyCacheMatchesTheBusAfterDeletes() async throws {
        let result = try await tool("/usr/bin/python3", ["-c", Self.proxyScript, bus.address], timeout: 60)
        XCTAssertTrue(result.succeeded, "\(result)")
        XCTAssertEqual(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "done", "diverging steps:\n\(result.stdout)\n\(result.stderr)")
    }

    func testDeletingAPropertyThatIsNotTheGroupsLastInvalidatesIt() async throws {
        try await client.create("app.a", "i", default: .int32(1))
        try await client.create("app.b", "i", default: .int32(2))
        let recorder = try await client.recordChanges(ofGroup: "app")
        try await client.delete("app.a")
        try await client.set("app.b", .int32(3))
        let signals = await recorder.wait { $0.contains { $0.changed["b"] == .int32(3) } }
        XCTAssertEqual(signals.first?.invalidated, ["a"], "\(signals)")
    }

    func testPropertiesSetOnAReadOnlyPropertyAnswersPropertyReadOnly() async throws {
        try await client.create("app.fixed", "i", default: .int32(1), options: ["writable": .variant(.boolean(false))])
        await assertDBusError(PropBusAPI.standard("PropertyReadOnly"), containing: ["app.fixed"]) {
            try await self.client.set("app.fixed", .int32(2))
        }
        // The daemon's own method keeps its own name.
        await assertDBusError(PropBusAPI.error("ReadOnly")) {
            try await self.client.apply(set: [("app.fixed", .int32(2))])
        }
    }

    func testEmptyInterfaceNameGetsAndListsEveryPropertyOnce() async throws {
        try await client.call(PropBusAPI.manager, "CreateCommand", [.string("vm.run"), .vardict(["exec": .variant(.array(of: .string, [.string("true")]))])])
        let path = PropBusAPI.rootPath + "/vm/run"
        let all = try await client.call(at: path, PropBusAPI.properties, "GetAll", [.string("")])
        guard case .dictionary(_, _, let entries)? = all.first else { return XCTFail("\(all)") }
        let names = entries.compactMap(\.key.stringValue)
        XCTAssertEqual(names.count, Set(names).count, "each property once: \(names)")
        XCTAssertTrue(names.contains("Enabled"), "\(names)")
        let enabled = try await client.call(at: path, PropBusAPI.properties, "Get", [.string(""), .string("Enabled")])
        XCTAssertEqual(enabled.first, .variant(.boolean(true)))
    }

    func testAllowsConcurrentExecutionChangeIsSignalledAndCreationSendsOnlyItsAnnouncement() async throws {
        let recorder = try await client.record(pathNamespace: PropBusAPI.rootPath + "/vm", member: "PropertiesChanged")
        let exec = DBusValue.variant(.array(of: .string, [.string("true")]))
        try await client.call(PropBusAPI.manager, "CreateCommand", [.string("vm.run"), .vardict(["exec": exec])])
        try await client.call(PropBusAPI.manager, "CreateCommand", [.string("vm.run"), .vardict(["exec": exec, "concurrent": .variant(.boolean(true))])])
        // Barrier: a later change whose signal must arrive.
        try await client.create("vm.marker", "i", default: .int32(0))
        try await client.set("vm.marker", .int32(1))
        let signals = await recorder.wait { $0.contains { $0.changed["marker"] == .int32(1) } }
        let commandSignals = signals.filter { $0.path.hasSuffix("/vm/run") }
        // The object's appearance, announced on its own path for proxies made before it (one per
        // interface, with every value), then the flip; nothing else at creation.
        XCTAssertEqual(commandSignals.count, 3, "the announcement of each interface, then the flip: \(commandSignals)")
        XCTAssertEqual(commandSignals.prefix(2).compactMap { $0.arguments.first?.stringValue }.sorted(),
                       [PropBusAPI.values, "org.propbus.PropBus1.Command"].sorted(), "\(commandSignals)")
        XCTAssertEqual(commandSignals.first { $0.arguments.first?.stringValue == "org.propbus.PropBus1.Command" }?.changed["AllowsConcurrentExecution"], .boolean(false), "\(commandSignals)")
        XCTAssertEqual(commandSignals.last?.changed, ["AllowsConcurrentExecution": .boolean(true)], "\(commandSignals)")
    }
}
