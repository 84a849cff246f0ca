import DBus
import PropBus
import Foundation
import XCTest

/// A hostile or heavy client must not take the daemon down through the bus itself: fds it sends,
/// messages too big for the bus, floods.
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

/// Replies and signals too big for the bus (1 MiB here, as `max_message_size` in the test bus's
/// configuration and `--max-message-size`): answered with LimitsExceeded or degraded, never
/// sent, so the daemon stays on the bus.
final class HostileMessageSizeTests: DaemonTestCase, @unchecked Sendable {
    static let limit = 1 << 20
    override var busMaxMessageSize: Int? { Self.limit }
    override var daemonArguments: [String] { ["--max-message-size", "\(Self.limit)", "--max-value-size", "300000"] }

    private func big(_ n: Int) -> DBusValue { .string(String(repeating: Character(UnicodeScalar(UInt8(97 + n % 26))), count: 250_000)) }

    /// The daemon is still on the bus and serves another client.
    private func assertStillServing(_ key: String, file: StaticString = #filePath, line: UInt = #line) async throws {
        XCTAssertTrue(daemon.process.isRunning, "propbusd exited: \(daemon.stderr)", file: file, line: line)
        let other = try await Client.connect(to: bus)
        defer { other.close() }
        let value = try await other.get(key)
        XCTAssertEqual(value.stringValue?.utf8.count, 250_000, file: file, line: line)
    }

    func testRepliesTooBigForTheBusAreLimitsExceededAndTheDaemonStays() async throws {
        for n in 1...5 { try await client.create("big\(n).v", "s", default: big(n)) }
        await assertDBusError(PropBusAPI.error("LimitsExceeded"), containing: ["ListProperties", "bytes", "prefix"]) {
            try await client.list()
        }
        await assertDBusError(PropBusAPI.error("LimitsExceeded"), containing: ["GetManagedObjects", "bytes", "one group"]) {
            try await client.call(PropBusAPI.objectManager, "GetManagedObjects")
        }
        // A narrower call works.
        let listed = try await client.list(prefix: "big1.")
        XCTAssertEqual(listed.count, 1)
        try await assertStillServing("big3.v")
    }

    func testAWriteThatWouldMakeAGroupUnreadableIsRefused() async throws {
        for n in 1...4 { try await client.create("grp.v\(n)", "s", default: big(n)) }
        await assertDBusError(PropBusAPI.error("LimitsExceeded"), containing: ["group grp", "GetAll"]) {
            try await client.create("grp.v5", "s", default: big(5))
        }
        try await client.create("grp.small", "s", default: .string("x"))
        await assertDBusError(PropBusAPI.error("LimitsExceeded"), containing: ["group grp"]) {
            try await client.set("grp.small", big(6))
        }
        let all = try await client.getAll(group: "grp")
        XCTAssertEqual(all.count, 5)
        await assertDBusError(PropBusAPI.error("LimitsExceeded"), containing: ["description", "4096"]) {
            try await client.create("grp.described", "s", default: .string(""), options: ["description": .string(String(repeating: "d", count: 5000))])
        }
        try await assertStillServing("grp.v1")
    }

    /// A store written under a larger limit holds a group too big for one message: the daemon
    /// must still start and keep serving. (Start-up sends no InterfacesAdded since the lean start-up; the
    /// tree's own too-big InterfacesAdded path is MessageSizeTests'.)
    func testAStoreWithAGroupTooBigForOneMessageStillStarts() async throws {
        try await restartDaemon(arguments: ["--max-message-size", "\(4 << 20)", "--max-value-size", "300000"])
        for n in 1...5 { try await client.create("grp.v\(n)", "s", default: .string(""), options: ["persistent": .boolean(true)]) }
        for n in 1...5 { try await client.set("grp.v\(n)", big(n)) }
        try await restartDaemon(arguments: daemonArguments)
        try await assertStillServing("grp.v3")
        await assertDBusError(PropBusAPI.error("LimitsExceeded"), containing: ["GetAll", "Properties.Get"]) {
            try await client.getAll(group: "grp")
        }
        // Writes that do not grow the group still work (each call must fit the bus: a client
        // sending more than max_message_size is itself disconnected).
        try await client.set("grp.v1", big(11))
        try await assertStillServing("grp.v1")
    }
}

/// One connection pipelining thousands of calls must not starve the others.
final class HostileFloodTests: DaemonTestCase, @unchecked Sendable {
    /// Two connections of one process. The flooder pipelines `count` ListProperties(prefix)
    /// calls and reads the replies as they come (a GLib main loop); once they are all sent, the
    /// victim makes `gets` Properties.Get calls of `victim.x`, one at a time. Prints the daemon's
    /// serial of every reply, the flood's on one line and the victim's on the next, then "done".
    /// The daemon numbers what it sends in the order it sends it, so the serials tell how many
    /// flood replies went out before each of the victim's, whatever order the two connections
    /// read them in. (A client that never reads makes the bus itself stop reading from the daemon
    /// once 127 MB of replies are queued for it: that is the bus's limit to enforce, not the
    /// daemon's.)
    static let floodScript = """
    import dbus, dbus.lowlevel, dbus.mainloop.glib, sys
    from gi.repository import GLib
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    address, count, prefix, gets = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    flooder, victim = dbus.bus.BusConnection(address), dbus.bus.BusConnection(address)
    loop = GLib.MainLoop()
    flood, victims = [], []
    replies = (dbus.lowlevel.MethodReturnMessage, dbus.lowlevel.ErrorMessage)
    def finish_when_all_came():
        if len(flood) == count and len(victims) == gets:
            loop.quit()
    def get():
        m = dbus.lowlevel.MethodCallMessage("org.propbus.PropBus1", "/org/propbus/PropBus1/victim",
                                            "org.freedesktop.DBus.Properties", "Get")
        m.append("org.propbus.PropBus1.Values", "x", signature="ss")
        victim.send_message(m)
    def on_flood(connection, message):
        if isinstance(message, replies):
            flood.append(message.get_serial())
            finish_when_all_came()
    def on_victim(connection, message):
        if isinstance(message, replies):
            if not isinstance(message, dbus.lowlevel.MethodReturnMessage) or message.get_args_list() != [7]:
                print("victim: unexpected reply", message.get_args_list(), flush=True)
            victims.append(message.get_serial())
            if len(victims) < gets:
                get()
            finish_when_all_came()
    flooder.add_message_filter(on_flood)
    victim.add_message_filter(on_victim)
    for _ in range(count):
        m = dbus.lowlevel.MethodCallMessage("org.propbus.PropBus1", "/org/propbus/PropBus1",
                                            "org.propbus.PropBus1.Manager", "ListProperties")
        m.append(prefix, signature="s")
        flooder.send_message(m)
    flooder.flush()
    print("sent", flush=True)
    get()
    loop.run()
    print("flood", *flood)
    print("victim", *victims)
    print("done", flush=True)
    """

    /// Whether propbusd was built with `-sanitize=address` (its runtime is linked statically).
    static let daemonIsSanitized: Bool = {
        guard let binary = FileManager.default.contents(atPath: BuildProducts.propbusd) else { return false }
        return binary.range(of: Data("__asan_init".utf8)) != nil
    }()

    private func peakRSSKilobytes() -> Int {
        let status = (try? String(contentsOfFile: "/proc/\(daemon.process.pid)/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") } ?? ""
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }

    /// Fairness, counted rather than timed: the victim's first Get, sent once the whole flood
    /// is on its way, is not answered after all of it, and each later Get
    /// waits behind at most a few rounds' worth of flood replies (a round serves every waiting
    /// sender once, at most 64 calls). Before the per-sender queues, the first Get waited
    /// behind all of the flood.
    func testAFloodingConnectionDoesNotStarveAnotherClientsGet() async throws {
        try await client.apply(set: [])
        for n in 0..<200 {
            try await client.create("flood.p\(String(format: "%03d", n))", "s", default: .string(String(repeating: "v", count: 100)))
        }
        try await client.create("victim.x", "i", default: .int32(7))
        let idleRSS = peakRSSKilobytes()
        let count = 1000, gets = 20
        let flooder = try ChildProcess("/usr/bin/python3", ["-c", Self.floodScript, bus.address, "\(count)", "flood.", "\(gets)"],
                                       environment: bus.environment)
        defer { flooder.signal(SIGKILL) }
        // Bounds a hang, measures nothing: the flood is served to its end.
        let done = await eventually(timeout: 300) { flooder.stdout.contains("done") || !flooder.isRunning }
        XCTAssertTrue(done && flooder.stdout.contains("done"), "flooder: \(flooder.stdout) \(flooder.stderr)")
        XCTAssertFalse(flooder.stdout.contains("unexpected"), flooder.stdout)
        let lines = flooder.stdout.split(separator: "\n")
        func serials(_ label: String) -> [UInt32] {
            lines.first { $0.hasPrefix(label + " ") }.map { $0.split(separator: " ").dropFirst().compactMap { UInt32($0) } } ?? []
        }
        let flood = serials("flood"), victim = serials("victim")
        XCTAssertEqual(flood.count, count, flooder.stdout)
        XCTAssertEqual(victim.count, gets, flooder.stdout)
        // How many flood replies the daemon sent before each of the victim's.
        let sentBefore = victim.map { serial in flood.filter { $0 < serial }.count }
        let report = "flood replies sent before each of the victim's \(gets) Gets (of \(count)): \(sentBefore)"
        // Before the flood's last quarter: where its call reaches the daemon depends on how
        // the bus interleaves the two connections (up to a fifth of the flood went first in
        // loaded runs); a daemon serving one sender until it has nothing left sends all of it.
        XCTAssertLessThanOrEqual(sentBefore.first ?? count, count * 3 / 4, report)
        let waits = zip(sentBefore.dropFirst(), sentBefore).map { $0 - $1 }
        XCTAssertLessThanOrEqual(waits.max() ?? 0, Self.mostFloodRepliesBetweenVictimGets, report)
        let peak = peakRSSKilobytes()
        // Under AddressSanitizer freed memory sits in its quarantine: RSS says nothing there.
        if !Self.daemonIsSanitized {
            XCTAssertLessThan(peak - idleRSS, 50_000, "peak RSS grew from \(idleRSS) kB to \(peak) kB during the flood")
        }
        print("flood: \(report); peak RSS \(idleRSS) kB → \(peak) kB")
        XCTAssertTrue(daemon.process.isRunning)
    }

    /// The most flood replies the daemon may send between two of the victim's Gets: the rest of
    /// the round under way when the next Get arrives (at most 64 calls) and one more in the next
    /// round, where the victim has its turn. A daemon serving a sender's calls until none are
    /// left sends the whole backlog before the victim's first.
    static let mostFloodRepliesBetweenVictimGets = 100
}
