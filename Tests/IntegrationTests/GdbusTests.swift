import DBus
import XCTest

/// `gdbus call` introspects its target first and waits 3 s for an answer. Every call here has a
/// 2.5 s overall limit, so a service that stalls introspection or leaves an unknown call
/// unanswered fails the test instead of slowing it. Nothing is measured.
final class GdbusTests: DaemonTestCase {
    private var groupPath: String { PropBusAPI.rootPath + "/ui/switch" }

    private func assertGdbusError(_ path: String, _ method: String, _ arguments: [String], name: String,
                                  containing fragment: String? = nil, file: StaticString = #filePath, line: UInt = #line) async throws {
        let result = try await gdbusCall(path, method, arguments)
        XCTAssertFalse(result.timedOut, "gdbus stalled: \(result)", file: file, line: line)
        XCTAssertEqual(result.status, 1, "\(result)", file: file, line: line)
        XCTAssertTrue(result.stderr.contains("GDBus.Error:\(name)"), "expected \(name): \(result)", file: file, line: line)
        if let fragment {
            XCTAssertTrue(result.stderr.contains(fragment), "expected '\(fragment)' in: \(result.stderr)", file: file, line: line)
        }
    }

    func testGdbusCreatesListsGetsAndSetsWithoutStalling() async throws {
        let create = try await gdbusCall(PropBusAPI.rootPath, "\(PropBusAPI.manager).CreateProperty", ["ui.switch.on", "b", "<false>", "{}"])
        XCTAssertTrue(create.succeeded, "\(create)")
        XCTAssertEqual(create.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "()")
        let set = try await gdbusCall(groupPath, "\(PropBusAPI.properties).Set", [PropBusAPI.values, "on", "<true>"])
        XCTAssertTrue(set.succeeded, "\(set)")
        let get = try await gdbusCall(groupPath, "\(PropBusAPI.properties).Get", [PropBusAPI.values, "on"])
        XCTAssertEqual(get.stdout.trimmingCharacters(in: .whitespacesAndNewlines), "(<true>,)", "\(get)")
        let list = try await gdbusCall(PropBusAPI.rootPath, "\(PropBusAPI.manager).ListProperties", [""])
        XCTAssertTrue(list.succeeded, "\(list)")
        XCTAssertTrue(list.stdout.contains("'ui.switch.on', 'b', <true>"), list.stdout)
        let revision = try await gdbusCall(groupPath, "\(PropBusAPI.values).GetWithRevision", ["on"])
        XCTAssertTrue(revision.succeeded, "\(revision)")
        XCTAssertTrue(revision.stdout.hasPrefix("(<true>, uint64 "), revision.stdout)
        let ping = try await gdbusCall(PropBusAPI.rootPath, "\(PropBusAPI.peer).Ping", [])
        XCTAssertTrue(ping.succeeded, "\(ping)")
    }

    func testGdbusIntrospectAnswersForRootGroupsAndIntermediateNodes() async throws {
        try await client.create("ui.switch.on", "b", default: .boolean(false))
        for path in [PropBusAPI.rootPath, PropBusAPI.rootPath + "/ui", groupPath] {
            let result = try await tool("gdbus", ["introspect", "--address", bus.address, "--dest", PropBusAPI.busName, "--object-path", path],
                                        timeout: 2.5)
            XCTAssertTrue(result.succeeded, "\(result)")
        }
    }

    func testUnknownObjectIsAnsweredAtOnce() async throws {
        try await assertGdbusError(PropBusAPI.rootPath + "/no/such", "\(PropBusAPI.properties).Get", [PropBusAPI.values, "x"],
                                   name: PropBusAPI.standard("UnknownObject"))
        // (Peer is answered by libdbus itself on every path, so it is no probe for unknown objects.)
        try await assertGdbusError("/org/elsewhere", "\(PropBusAPI.manager).ListProperties", [""], name: PropBusAPI.standard("UnknownObject"))
    }

    func testUnknownInterfaceIsAnsweredAtOnce() async throws {
        try await assertGdbusError(PropBusAPI.rootPath, "org.example.Nope.Hello", [], name: PropBusAPI.standard("UnknownInterface"))
    }

    func testUnknownMethodIsAnsweredAtOnce() async throws {
        try await assertGdbusError(PropBusAPI.rootPath, "\(PropBusAPI.manager).Frobnicate", [], name: PropBusAPI.standard("UnknownMethod"))
    }

    func testUnknownPropertyIsAnsweredAtOnce() async throws {
        try await client.create("ui.switch.on", "b", default: .boolean(false))
        try await assertGdbusError(groupPath, "\(PropBusAPI.properties).Get", [PropBusAPI.values, "missing"],
                                   name: PropBusAPI.standard("UnknownProperty"), containing: "missing")
    }

    func testWrongTypeIsInvalidArgsNamingTheKey() async throws {
        try await client.create("ui.switch.on", "b", default: .boolean(false))
        try await assertGdbusError(groupPath, "\(PropBusAPI.properties).Set", [PropBusAPI.values, "on", "<'yes'>"],
                                   name: PropBusAPI.standard("InvalidArgs"), containing: "property ui.switch.on has type 'b', got 's'")
    }

    func testPropbusErrorsReachGdbusWithTheirNames() async throws {
        try await assertGdbusError(PropBusAPI.rootPath, "\(PropBusAPI.manager).DeleteProperty", ["no.such"],
                                   name: PropBusAPI.error("UnknownKey"), containing: "no.such")
        try await assertGdbusError(PropBusAPI.rootPath, "\(PropBusAPI.manager).CreateProperty", ["nodot", "b", "<false>", "{}"],
                                   name: PropBusAPI.error("InvalidKey"), containing: "nodot")
    }
}
