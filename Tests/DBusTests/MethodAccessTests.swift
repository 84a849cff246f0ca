import Foundation
import XCTest

@testable import DBus

/// Access control comes from the method table: a method declares the
/// privilege it needs, and the tree checks it before the handler runs, so a denied call changes
/// nothing and no handler can forget its check.
final class MethodAccessTests: XCTestCase {
    private final class State: @unchecked Sendable { // confined to the connection's queue
        var ran: [String] = []
        var checked: [String] = []
    }

    private static let interface = "org.propbus.Test"

    func testDeclaredWriteIsRefusedForANonWriterWithoutRunningTheHandler() async throws {
        let bus = try TestBus.start()
        defer { bus.stop() }
        let service = try await bus.connect(), client = try await bus.connect()
        defer { service.close(); client.close() }
        let state = State()
        let tree = await onQueue(service) { () -> ObjectTree in
            let tree = ObjectTree(connection: service)
            tree.export(ExportedObject {
                [InterfaceDescription(Self.interface, methods: [
                    MethodDescription("Write", in: [("key", .string)], writes: true, access: .write(.argument("key"))) { call in
                        state.ran.append("Write " + ((try? call.string("key")) ?? ""))
                        return .reply([])
                    },
                    MethodDescription("Apply", in: [("set", .dictionary(key: .string, value: .variant)), ("reset", .array(.string))],
                                      writes: true, access: .write(.arguments(["set", "reset"]))) { _ in
                        state.ran.append("Apply")
                        return .reply([])
                    },
                    MethodDescription("Open") { _ in
                        state.ran.append("Open")
                        return .reply([])
                    },
                ])]
            }, at: "/obj")
            // The policy of this test: nobody may write keys under "locked.".
            tree.accessCheck = { access, call throws(DBusError) in
                guard case .write(let names, _) = access else { return }
                for name in try call.names(names) {
                    state.checked.append(name)
                    if name.hasPrefix("locked.") {
                        throw DBusError(name: DBusError.Name.accessDenied, message: "may not write \(name)")
                    }
                }
            }
            return tree
        }
        func call(_ member: String, _ arguments: [DBusValue]) async throws(DBusError) {
            _ = try await client.call(destination: service.uniqueName, path: "/obj", interface: Self.interface,
                                      member: member, arguments: arguments)
        }
        do {
            try await call("Write", [.string("locked.key")])
            XCTFail("a write of a locked key was allowed")
        } catch {
            XCTAssertEqual(error.name, DBusError.Name.accessDenied)
            XCTAssertTrue(error.message.contains("locked.key"), error.message)
        }
        // Every name of a dictionary and an array is checked, in the order sent, before the handler.
        do {
            try await call("Apply", [.vardict(["open.a": .int32(1)]), .array(of: .string, [.string("open.b"), .string("locked.c")])])
            XCTFail("Apply with a locked key was allowed")
        } catch {
            XCTAssertEqual(error.name, DBusError.Name.accessDenied)
            XCTAssertTrue(error.message.contains("locked.c"), error.message)
        }
        try await call("Write", [.string("open.key")])
        try await call("Open", [])
        let (ran, checked) = await onQueue(service) { (state.ran, state.checked) }
        XCTAssertEqual(ran, ["Write open.key", "Open"], "a denied call reached its handler")
        XCTAssertEqual(checked, ["locked.key", "open.a", "open.b", "locked.c", "open.key"])

        // A declared privilege with no check installed is refused, not waved through.
        await onQueue(service) { tree.accessCheck = nil }
        do {
            try await call("Write", [.string("open.key")])
            XCTFail("a declared privilege passed with no check installed")
        } catch {
            XCTAssertEqual(error.name, DBusError.Name.accessDenied)
        }
        let after = await onQueue(service) { state.ran }
        XCTAssertEqual(after, ["Write open.key", "Open"])
    }
}
