import DBus
import Etcd
import Foundation
import XCTest

/// The first moments after a start, while FleetState is `connecting`: what D-Bus activation
/// and `systemctl start propbusd && propctl set …` meet.
final class FleetStartupTests: FleetTestCase {
    override var ownsEtcd: Bool { true }

    /// The answer to one call, handed over from the connection's queue.
    /// `@unchecked Sendable`: `result` is written once before `done` is signalled, read after.
    private final class Answer: @unchecked Sendable {
        var result: Result<Message, DBusError>?
        let done = DispatchSemaphore(value: 0)
    }

    func testAWriteWhileConnectingWaitsForTheConnectionInsteadOfFailing() async throws {
        let key = "lab.start.mode"
        try await hostA.createFleet(key, "s", default: .string("off"))
        let arrived = await hostB.waitFor(key, .string("off"))
        XCTAssertTrue(arrived, diagnostics)
        await hostB.stop()
        // Stopped, not dead: B's first read waits, so B stays `connecting` until the member
        // runs again.
        let member = try XCTUnwrap(cluster!.members[0].process)
        kill(member.processIdentifier, SIGSTOP)
        var running = false
        defer { if !running { kill(member.processIdentifier, SIGCONT) } }
        try await hostB.start(connected: false)

        // The Set, then a read of FleetState on the same connection: the daemon takes them in
        // order, so the state read is the one the Set met.
        let (path, name) = PropBusAPI.locate(key)
        let set = try Message.methodCall(destination: PropBusAPI.busName, path: path, interface: PropBusAPI.properties, member: "Set")
        try set.append([.string(PropBusAPI.values), .string(name), .variant(.string("on"))])
        let get = try Message.methodCall(destination: PropBusAPI.busName, path: PropBusAPI.rootPath, interface: PropBusAPI.properties, member: "Get")
        try get.append([.string(PropBusAPI.manager), .string("FleetState")])
        let setAnswer = Answer(), getAnswer = Answer()
        let connection = hostB.client.connection
        let messages = UncheckedBox((set, get))
        connection.queue.async {
            connection.call(messages.value.0, timeoutMilliseconds: 20_000) { setAnswer.result = $0; setAnswer.done.signal() }
            connection.call(messages.value.1, timeoutMilliseconds: 20_000) { getAnswer.result = $0; getAnswer.done.signal() }
        }
        XCTAssertEqual(getAnswer.done.wait(timeout: .now() + 10), .success)
        let state = try getAnswer.result?.get().arguments().first?.unwrappingVariant
        XCTAssertEqual(state, .string("connecting"), "the Set did not meet FleetState connecting")

        kill(member.processIdentifier, SIGCONT)
        running = true
        XCTAssertEqual(setAnswer.done.wait(timeout: .now() + 10), .success)
        switch setAnswer.result {
        case .failure(let error): XCTFail("a Set while connecting failed instead of waiting: \(error.name): \(error.message)\n\(diagnostics)")
        default: break
        }
        let written = await hostA.waitFor(key, .string("on"))
        XCTAssertTrue(written, "the Set made while connecting never reached A\n\(diagnostics)")
    }
}
