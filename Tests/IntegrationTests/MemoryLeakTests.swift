import DBus
import Foundation
import PropBus
import XCTest

/// The daemon's memory stays flat under calls anyone may make. A property
/// description built per lookup (every Set, refused ones too, every flushed PropertiesChanged,
/// `Get("", name)`, GetAll of a group with secrets, every Introspect) was a reference cycle,
/// never freed: 768 bytes per changing Set, 384 per property per Introspect.
///
/// RSS is compared after a warm-up (the allocator's and the bus queues' high-water marks are
/// reached there) against RSS after the loop; the bound is far below what the leak made.
final class MemoryLeakTests: AccessControlTestCase, @unchecked Sendable {
    private static let group = "leak"
    private static let keyCount = 1000
    /// Growth allowed over a loop: the leak made 77 MB over 100k Sets and 3.8 GB over 10k
    /// Introspects of the 1,000-key group.
    private static let allowedGrowth = 8 << 20

    override func setUp() async throws {
        try await super.setUp()
        let errors = await pipeline(count: Self.keyCount, window: 64) { index in
            Self.call(PropBusAPI.rootPath, PropBusAPI.manager, "CreateProperty",
                      [.string("\(Self.group).k\(index)"), .string("i"), .variant(.int32(0)), .vardict([:])])
        }
        XCTAssertEqual(errors.count, 0, "creating the group: \(errors.first.map { "\($0)" } ?? "")")
        try await client.create("vault.pin", "s", default: .string("1234"), options: ["secret": .boolean(true)])
        try await client.create("vault.open", "i", default: .int32(0))
    }

    func testDaemonRSSStaysFlatOver100kSetsAndReadsOfRestrictedKeys() async throws {
        func round(_ count: Int) async -> [DBusError] {
            await pipeline(count: count, window: 256) { index in
                let (path, name) = PropBusAPI.locate("\(Self.group).k\(index % Self.keyCount)")
                switch index % 20 {
                case 19:  // refused: a string for an int
                    return Self.call(path, PropBusAPI.properties, "Set", [.string(PropBusAPI.values), .string(name), .variant(.string("x"))])
                case 18:  // an empty interface name: the lookup path
                    return Self.call(Key.objectPath(ofGroup: "vault"), PropBusAPI.properties, "Get", [.string(""), .string("pin")])
                case 17:  // a group with a secret: the restricted key goes through its description
                    return Self.call(Key.objectPath(ofGroup: "vault"), PropBusAPI.properties, "GetAll", [.string(PropBusAPI.values)])
                default:  // a change, flushed as PropertiesChanged
                    return Self.call(path, PropBusAPI.properties, "Set", [.string(PropBusAPI.values), .string(name), .variant(.int32(Int32(index)))])
                }
            }
        }
        let warmUp = await round(10_000)
        XCTAssertEqual(warmUp.count, 500, "only the string-for-int Sets are refused: \(warmUp.first.map { "\($0)" } ?? "")")
        let before = try residentBytes()
        let errors = await round(100_000)
        let after = try residentBytes()
        XCTAssertEqual(errors.count, 5000)
        XCTAssertLessThan(after - before, Self.allowedGrowth, "propbusd grew from \(before) to \(after) bytes over 100k calls")
        print("MemoryLeakTests: RSS \(before) -> \(after) bytes over 100k Sets and reads")
    }

    /// 1,000 Introspects (the leak made 384 MB over them): each one describes 1,000 properties
    /// and renders ~100 kB of XML, ~10 ms in a debug build, so 10k would take the suite's
    /// daemon well over a minute; 10k passed too, by hand.
    func testDaemonRSSStaysFlatOverIntrospectsOfA1000KeyGroup() async throws {
        let path = Key.objectPath(ofGroup: Self.group)
        func round(_ count: Int) async -> [DBusError] {
            await pipeline(count: count, window: 16) { _ in Self.call(path, PropBusAPI.introspectable, "Introspect", []) }
        }
        let warmUp = await round(500)
        XCTAssertEqual(warmUp.count, 0, "\(warmUp.first.map { "\($0)" } ?? "")")
        let before = try residentBytes()
        let errors = await round(1000)
        let after = try residentBytes()
        XCTAssertEqual(errors.count, 0, "\(errors.first.map { "\($0)" } ?? "")")
        XCTAssertLessThan(after - before, Self.allowedGrowth, "propbusd grew from \(before) to \(after) bytes over 1,000 Introspects")
        print("MemoryLeakTests: RSS \(before) -> \(after) bytes over 1,000 Introspects of \(Self.keyCount) keys")

        // The same as an unprivileged caller (one process, one call after the other; the leak
        // made 38 MB over these 100).
        let start = try residentBytes()
        let loop = "for i in $(seq 100); do dbus-send --bus=\(bus.address) --print-reply=literal --dest=\(PropBusAPI.busName) \(path) \(PropBusAPI.introspectable).Introspect >/dev/null || exit 1; done"
        let result = try await asNobody("/bin/sh", ["-c", loop], timeout: 120)
        assertSucceeded(result)
        let end = try residentBytes()
        XCTAssertLessThan(end - start, Self.allowedGrowth, "propbusd grew from \(start) to \(end) bytes over 100 Introspects by uid \(Self.nobody)")
        print("MemoryLeakTests: RSS \(start) -> \(end) bytes over 100 Introspects by uid \(Self.nobody)")
    }

    // MARK: Helpers

    /// The daemon's resident set size (`VmRSS`), in bytes.
    private func residentBytes() throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(daemon.process.pid)/status", encoding: .utf8)
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
              let kilobytes = Int(line.split(separator: " ").dropFirst().first ?? "") else {
            throw TestSetupError("no VmRSS in /proc/\(daemon.process.pid)/status")
        }
        return kilobytes * 1024
    }

    private static func call(_ path: String, _ interface: String, _ member: String, _ arguments: [DBusValue]) -> Message {
        // The arguments are the test's own, valid by construction.
        let message = try! Message.methodCall(destination: PropBusAPI.busName, path: path, interface: interface, member: member)
        try! message.append(arguments)
        return message
    }

    /// Sends `count` calls made by `make`, keeping `window` of them in flight on the test's
    /// connection, and returns the errors they were answered with: thousands of calls a second,
    /// where one `await` per call would be a thread hop each way.
    private func pipeline(count: Int, window: Int, _ make: @escaping @Sendable (Int) -> Message) async -> [DBusError] {
        let connection = client.connection
        return await withCheckedContinuation { (continuation: CheckedContinuation<[DBusError], Never>) in
            connection.queue.async {
                let state = PipelineState(count: count, continuation: continuation)
                func sendNext() {
                    guard state.sent < count else { return }
                    let message = make(state.sent)
                    state.sent += 1
                    connection.call(message, timeoutMilliseconds: 60_000) { result in
                        if case .failure(let error) = result { state.errors.append(error) }
                        state.answered += 1
                        if state.answered == count { state.finish() } else { sendNext() }
                    }
                }
                if count == 0 { state.finish() }
                for _ in 0..<min(window, count) { sendNext() }
            }
        }
    }
}

/// The counters of one ``MemoryLeakTests`` pipeline.
///
/// `@unchecked Sendable`: created and used on the test connection's queue only.
private final class PipelineState: @unchecked Sendable {
    let count: Int
    var sent = 0
    var answered = 0
    var errors: [DBusError] = []
    private var continuation: CheckedContinuation<[DBusError], Never>?

    init(count: Int, continuation: CheckedContinuation<[DBusError], Never>) {
        self.count = count
        self.continuation = continuation
    }

    func finish() {
        continuation?.resume(returning: errors)
        continuation = nil
    }
}
