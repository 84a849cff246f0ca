import Dispatch
import Foundation
import Glibc
import Synchronization
import XCTest

@testable import DBus

/// `WatchPoller` and `MainLoop` tested directly: the poller on a pipe of
/// our own, the loop's watches, timeouts and dispatch rounds on a private bus.
final class MainLoopTests: XCTestCase {
    // MARK: WatchPoller

    /// The ready ids the poller reported, and the barrier it waits behind.
    private final class Readiness: Sendable {
        let seen = Mutex<[Int]>([])
        /// Set before the pipes close: the poll thread may still look at them once (POLLNVAL).
        let done = Mutex(false)
        func append(_ id: Int) { seen.withLock { $0.append(id) } }
        func wait(for id: Int, count: Int, timeout: TimeInterval = 5) -> [Int] {
            let deadline = Date().addingTimeInterval(timeout)
            while Date() < deadline {
                let now = seen.withLock { $0 }
                if now.filter({ $0 == id }).count >= count { return now }
                usleep(1_000)
            }
            return seen.withLock { $0 }
        }
    }

    private func makePipe() -> (read: Int32, write: Int32) {
        var fds: [Int32] = [-1, -1]
        XCTAssertEqual(pipe(&fds), 0)
        _ = fcntl(fds[0], F_SETFL, O_NONBLOCK)
        return (fds[0], fds[1])
    }

    private func poke(_ fd: Int32) {
        var one: UInt8 = 1
        XCTAssertEqual(write(fd, &one, 1), 1)
    }

    func testPollerReportsReadyDescriptorsOnItsQueueAndFollowsTheSet() {
        let queue = DispatchQueue(label: "poller-test")
        let data = makePipe(), barrier = makePipe()
        defer { for fd in [data.read, data.write, barrier.read, barrier.write] { close(fd) } }
        let readiness = Readiness()
        let poller = WatchPoller(queue: queue) { id, revents in
            dispatchPrecondition(condition: .onQueue(queue))
            guard !readiness.done.withLock({ $0 }) else { return }
            XCTAssertNotEqual(revents & Int16(POLLIN), 0)
            // Drain, as libdbus reads its socket: poll is level-triggered.
            var buffer = [UInt8](repeating: 0, count: 64)
            _ = read(id == 1 ? data.read : barrier.read, &buffer, 64)
            readiness.append(id)
        }
        defer {
            readiness.done.withLock { $0 = true }
            poller.update([])
            poller.stop()
        }
        let dataEntry = WatchPoller.Entry(id: 1, fd: data.read, events: Int16(POLLIN))
        let barrierEntry = WatchPoller.Entry(id: 2, fd: barrier.read, events: Int16(POLLIN))
        poller.update([dataEntry, barrierEntry])
        poke(data.write)
        XCTAssertEqual(readiness.wait(for: 1, count: 1), [1])
        // A watch libdbus disables is left out of the set: once the poller has taken the new set
        // (the barrier, which only it holds, has fired), data on it is not reported.
        poller.update([barrierEntry])
        poke(barrier.write)
        XCTAssertEqual(readiness.wait(for: 2, count: 1), [1, 2])
        poke(data.write)
        poke(barrier.write)
        XCTAssertEqual(readiness.wait(for: 2, count: 2), [1, 2, 2], "a watch left out of the set was reported")
        // Enabled again: the byte that waited is reported now.
        poller.update([dataEntry, barrierEntry])
        XCTAssertEqual(readiness.wait(for: 1, count: 2), [1, 2, 2, 1])
    }

    // MARK: MainLoop on a bus

    private static let interface = "org.propbus.Test"

    private final class Stash: @unchecked Sendable { // confined to the service's queue
        var held: [MethodCall] = []
    }

    private func exportEcho(on service: Connection, _ stash: Stash) async -> ObjectTree {
        await onQueue(service) {
            let tree = ObjectTree(connection: service)
            tree.export(ExportedObject {
                [InterfaceDescription(Self.interface, methods: [
                    MethodDescription("Echo", in: [("text", .string)], out: [("text", .string)]) { call in .reply([call.arguments[0]]) },
                    // A small call with a big reply: output outruns input.
                    MethodDescription("Big", in: [("bytes", .uint32)], out: [("text", .string)]) { call in
                        guard case .uint32(let count) = call.arguments[0] else { return .reply([]) }
                        return .reply([.string(String(repeating: "z", count: Int(count)))])
                    },
                    // Never answered: the caller's timeout must fire.
                    MethodDescription("Hold") { call in
                        stash.held.append(call)
                        return .deferred
                    },
                ])]
            }, at: "/obj")
            return tree
        }
    }

    /// libdbus's timeouts run on dispatch timers: a call nobody answers fails with `NoReply`
    /// after its timeout, an answered one's timeout never fires, and the loop goes on.
    func testTimeoutsFireThroughTheLoop() async throws {
        let bus = try TestBus.start()
        defer { bus.stop() }
        let service = try await bus.connect(), client = try await bus.connect()
        defer { service.close(); client.close() }
        let stash = Stash()
        let tree = await exportEcho(on: service, stash)
        _ = tree
        let answered = try await client.call(destination: service.uniqueName, path: "/obj", interface: Self.interface,
                                             member: "Echo", arguments: [.string("hi")], timeoutMilliseconds: 200)
        XCTAssertEqual(answered, [.string("hi")])
        do {
            _ = try await client.call(destination: service.uniqueName, path: "/obj", interface: Self.interface,
                                      member: "Hold", timeoutMilliseconds: 200)
            XCTFail("a call nobody answered returned")
        } catch {
            XCTAssertEqual(error.name, "org.freedesktop.DBus.Error.NoReply", error.message)
        }
        let after = try await client.call(destination: service.uniqueName, path: "/obj", interface: Self.interface,
                                          member: "Echo", arguments: [.string("still")])
        XCTAssertEqual(after, [.string("still")])
        await onQueue(service) { stash.held = [] }
    }

    /// A message far larger than the socket's buffer goes out in pieces: libdbus enables the
    /// writable watch until its queue drains, and reads the reply in pieces on the readable one.
    /// Many calls at once take several dispatch rounds (a round serves at most 64 calls).
    func testLargeMessagesAndBacklogsGoThroughTheWatches() async throws {
        let bus = try TestBus.start()
        defer { bus.stop() }
        let service = try await bus.connect(), client = try await bus.connect()
        defer { service.close(); client.close() }
        let tree = await exportEcho(on: service, Stash())
        _ = tree
        let big = String(repeating: "x", count: 4 << 20)
        let echoed = try await client.call(destination: service.uniqueName, path: "/obj", interface: Self.interface,
                                           member: "Echo", arguments: [.string(big)])
        XCTAssertEqual(echoed.first?.stringValue?.count, big.count)
        XCTAssertTrue(echoed.first?.stringValue == big)
        let name = service.uniqueName
        let replies = try await withThrowingTaskGroup(of: String.self) { group in
            for index in 0..<300 {
                group.addTask {
                    let reply = try await client.call(destination: name, path: "/obj", interface: Self.interface,
                                                      member: "Echo", arguments: [.string("\(index)")])
                    return reply.first?.stringValue ?? ""
                }
            }
            var all: [String] = []
            for try await reply in group { all.append(reply) }
            return all
        }
        XCTAssertEqual(Set(replies), Set((0..<300).map(String.init)))
    }

    /// Replies waiting to be sent hold the next calls back (`Connection.maximumQueuedOutput`),
    /// and the writes that drain the queue bring them back: 100 pipelined small calls whose
    /// replies (256 KiB each) outrun the socket are held at least once, and every one of them is
    /// answered all the same.
    func testQueuedOutputHoldsCallsBackUntilItDrains() async throws {
        let bus = try TestBus.start()
        defer { bus.stop() }
        let service = try await bus.connect(), client = try await bus.connect()
        defer { service.close(); client.close() }
        let tree = await exportEcho(on: service, Stash())
        _ = tree
        await onQueue(service) { service.maximumQueuedOutput = 64 << 10 }
        let name = service.uniqueName
        let size: UInt32 = 256 << 10
        let replies = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<100 {
                group.addTask {
                    let reply = try await client.call(destination: name, path: "/obj", interface: Self.interface,
                                                      member: "Big", arguments: [.uint32(size)], timeoutMilliseconds: 30_000)
                    return reply.first?.stringValue?.utf8.count ?? 0
                }
            }
            var all: [Int] = []
            for try await reply in group { all.append(reply) }
            return all
        }
        XCTAssertEqual(replies, Array(repeating: Int(size), count: 100))
        let held = await onQueue(service) { service.roundsHeldForOutput }
        XCTAssertGreaterThan(held, 0, "no round ever found output waiting: the check was not exercised")
    }
}
