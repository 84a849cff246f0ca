import DBus
import Foundation
import XCTest

/// A hostile or heavy client must not take the daemon down through the bus itself: fds it sends,
/// messages too big for the bus, floods (issue 10, items 1, 3, 5).
final class HostileBusTests: DaemonTestCase, @unchecked Sendable {
    /// The daemon's open file descriptors (`/proc/PID/fd`).
    private func openFDs() throws -> Int {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/\(daemon.process.pid)/fd").count
    }

    /// Sends `count` rounds of calls carrying unix fds (`h` alone, in a variant, a struct, a
    /// dict, an array), nearly all refused, through python-dbus; prints the errors it got.
    static let fdScript = """
    import dbus, os, sys
    bus = dbus.bus.BusConnection(sys.argv[1])
    count = int(sys.argv[2])
    root = bus.get_object("org.propbus.PropBus1", "/org/propbus/PropBus1")
    group = bus.get_object("org.propbus.PropBus1", sys.argv[3])
    r, w = os.pipe()
    fd = lambda: dbus.types.UnixFd(r)
    P = "org.freedesktop.DBus.Properties"
    V = "org.propbus.PropBus1.Values"
    M = "org.propbus.PropBus1.Manager"
    calls = [
        lambda: group.Set(V, "i", fd(), dbus_interface=P),                                    # TypeMismatch
        lambda: group.Set(V, "nothere", fd(), dbus_interface=P),                              # unknown key
        lambda: group.Set(V, "i", dbus.Struct((1, fd()), signature="ih", variant_level=1), dbus_interface=P),
        lambda: group.Set(V, "i", dbus.Dictionary({"a": fd()}, signature="sh", variant_level=1), dbus_interface=P),
        lambda: group.Set(V, "i", dbus.Array([fd(), fd()], signature="h", variant_level=1), dbus_interface=P),
        lambda: root.Apply(dbus.Dictionary({"fd.i": fd()}, signature="sv"), dbus.Array([], signature="s"), dbus_interface=M),
        lambda: root.CreateProperty("fd.new", "i", fd(), dbus.Dictionary({}, signature="sv"), dbus_interface=M),
        lambda: root.NoSuchMethod(fd(), dbus_interface=M),                                    # unknown method
        lambda: group.Set(V, "i", fd(), dbus_interface="org.propbus.Nothing"),                # unknown interface
        lambda: bus.get_object("org.propbus.PropBus1", "/nowhere").Get(fd(), dbus_interface=P), # unknown object
    ]
    errors = set()
    for _ in range(count):
        for call in calls:
            try:
                call()
            except dbus.exceptions.DBusException as e:
                errors.add(e.get_dbus_name())
    # A plain call last: every fd call before it was handled.
    root.ListProperties("", dbus_interface=M)
    print(" ".join(sorted(errors)))
    """

    func testReceivedFDsAreClosedEvenWhenTheCallIsRefused() async throws {
        try await client.create("fd.i", "i", default: .int32(0))
        // One call first, so lazily opened descriptors (the store, caches) are open already.
        _ = try await client.list()
        let before = try openFDs()
        let (path, _) = PropBusAPI.locate("fd.i")
        let result = try await tool("/usr/bin/python3", ["-c", Self.fdScript, bus.address, "6", path], timeout: 60)
        XCTAssertTrue(result.succeeded, "\(result)")
        // The calls were refused for the expected reasons, not lost.
        for name in ["org.freedesktop.DBus.Error.UnknownMethod", "org.freedesktop.DBus.Error.UnknownObject"] {
            XCTAssertTrue(result.stdout.contains(name), "\(result)")
        }
        let after = try openFDs()
        // 60 calls carrying 66 fds: before the fix each one stayed open in the daemon.
        XCTAssertLessThanOrEqual(after, before + 2, "the daemon kept the fds it received: \(before) → \(after) open")
        let value = try await client.get("fd.i")
        XCTAssertEqual(value, .int32(0))
    }
}

/// The same fds, sent by `nobody` to a daemon with access control: refused with AccessDenied.
final class HostileBusAccessTests: AccessControlTestCase, @unchecked Sendable {
    func testFDsOfCallsRefusedWithAccessDeniedAreClosed() async throws {
        try await client.create("fd.i", "i", default: .int32(0), options: ["writers": .array(of: .string, [])])
        _ = try await client.list()
        let fdDirectory = "/proc/\(daemon.process.pid)/fd"
        let before = try FileManager.default.contentsOfDirectory(atPath: fdDirectory).count
        let (path, _) = PropBusAPI.locate("fd.i")
        let result = try await asNobody("/usr/bin/python3", ["-c", HostileBusTests.fdScript, bus.address, "5", path], timeout: 60)
        XCTAssertTrue(result.succeeded, "\(result)")
        XCTAssertTrue(result.stdout.contains(Self.accessDenied), "\(result)")
        let after = try FileManager.default.contentsOfDirectory(atPath: fdDirectory).count
        XCTAssertLessThanOrEqual(after, before + 2, "the daemon kept the fds it received: \(before) → \(after) open")
    }
}
