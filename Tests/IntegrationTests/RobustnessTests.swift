import DBus
import XCTest

/// A stream of malformed calls: wrong signatures, wrong types, unknown members, huge and odd
/// values. Each gets an error reply at once, and the daemon goes on serving.
final class RobustnessTests: DaemonTestCase {
    /// Sends one raw call and returns its error name, or nil when it succeeded.
    private func errorName(path: String = PropBusAPI.rootPath, interface: String?, member: String,
                           _ arguments: [DBusValue]) async throws -> String? {
        let message = try Message.methodCall(destination: PropBusAPI.busName, path: path, interface: interface, member: member)
        try message.append(arguments)
        do {
            _ = try await client.connection.call(message, timeoutMilliseconds: 20_000)
            return nil
        } catch {
            return error.name
        }
    }

    /// Errors that would mean the daemon did not answer: it stalled, crashed or left the bus.
    private let notAnswered: Set<String> = [
        DBusError.Name.noReply, DBusError.Name.timeout, DBusError.Name.disconnected,
        DBusError.Name.serviceUnknown, DBusError.Name.nameHasNoOwner,
    ]

    private func assertStillServing(file: StaticString = #filePath, line: UInt = #line) async throws {
        XCTAssertTrue(daemon.process.isRunning, "propbusd exited: \(daemon.process.termination.map(\.description) ?? "") \(daemon.stderr)", file: file, line: line)
        let value = try await client.get("ok.key")
        XCTAssertEqual(value, .int32(42), file: file, line: line)
        let owned = try await client.nameHasOwner()
        XCTAssertTrue(owned, file: file, line: line)
    }

    func testMalformedCallsGetErrorRepliesAndTheDaemonKeepsServing() async throws {
        try await client.create("ok.key", "i", default: .int32(42))
        try await client.create("ok.text", "s", default: .string(""))
        let okPath = PropBusAPI.rootPath + "/ok"
        let manager = PropBusAPI.manager
        let properties = PropBusAPI.properties
        let values = PropBusAPI.values
        let calls: [(path: String, interface: String?, member: String, arguments: [DBusValue], expected: String?)] = [
            // Wrong signatures.
            (PropBusAPI.rootPath, manager, "CreateProperty", [], PropBusAPI.standard("InvalidArgs")),
            (PropBusAPI.rootPath, manager, "CreateProperty", [.int32(1)], PropBusAPI.standard("InvalidArgs")),
            (PropBusAPI.rootPath, manager, "CreateProperty", [.string("a.b"), .string("i"), .int32(0), .vardict([:])], PropBusAPI.standard("InvalidArgs")),
            (PropBusAPI.rootPath, manager, "CreateProperty", [.string("a.b"), .string("i"), .variant(.int32(0)), .vardict([:]), .string("extra")], PropBusAPI.standard("InvalidArgs")),
            (PropBusAPI.rootPath, manager, "DeleteProperty", [.uint32(7)], PropBusAPI.standard("InvalidArgs")),
            (PropBusAPI.rootPath, manager, "ListProperties", [], PropBusAPI.standard("InvalidArgs")),
            (PropBusAPI.rootPath, manager, "Apply", [.vardict([:])], PropBusAPI.standard("InvalidArgs")),
            (PropBusAPI.rootPath, manager, "Apply", [.array(of: .string, []), .array(of: .string, [])], PropBusAPI.standard("InvalidArgs")),
            (okPath, properties, "Get", [.string(values)], PropBusAPI.standard("InvalidArgs")),
            (okPath, properties, "Get", [.int32(1), .int32(2)], PropBusAPI.standard("InvalidArgs")),
            (okPath, properties, "Set", [.string(values), .string("key"), .int32(1)], PropBusAPI.standard("InvalidArgs")),
            (okPath, properties, "GetAll", [], PropBusAPI.standard("InvalidArgs")),
            (okPath, values, "CompareAndSet", [.string("key"), .string("0"), .variant(.int32(1))], PropBusAPI.standard("InvalidArgs")),
            (okPath, values, "Reset", [.bytes([1, 2, 3])], PropBusAPI.standard("InvalidArgs")),
            (okPath, PropBusAPI.introspectable, "Introspect", [.string("unexpected")], PropBusAPI.standard("InvalidArgs")),
            // libdbus answers Peer.Ping itself, without looking at the arguments: any answer will do.
            (PropBusAPI.rootPath, PropBusAPI.peer, "Ping", [.boolean(true)], nil),
            // Wrong types inside the right signature.
            (okPath, properties, "Set", [.string(values), .string("key"), .variant(.string("forty-two"))], PropBusAPI.standard("InvalidArgs")),
            (okPath, properties, "Set", [.string(values), .string("key"), .variant(.variant(.int32(1)))], PropBusAPI.standard("InvalidArgs")),
            (okPath, properties, "Set", [.string(values), .string("key"), .variant(.array(of: .int32, [.int32(1)]))], PropBusAPI.standard("InvalidArgs")),
            (PropBusAPI.rootPath, manager, "Apply", [.vardict(["ok.key": .string("x")]), .array(of: .string, [])], PropBusAPI.standard("InvalidArgs")),
            (PropBusAPI.rootPath, manager, "CreateProperty", [.string("odd.options"), .string("i"), .variant(.int32(0)),
                                                              .vardict(["minimum": .string("low"), "choices": .int32(3)])], PropBusAPI.standard("InvalidArgs")),
            // Unknown members, interfaces, objects and properties.
            (PropBusAPI.rootPath, manager, "Frobnicate", [], PropBusAPI.standard("UnknownMethod")),
            (okPath, values, "Frobnicate", [.string("x")], PropBusAPI.standard("UnknownMethod")),
            (PropBusAPI.rootPath, "org.example.Nope", "Anything", [], PropBusAPI.standard("UnknownInterface")),
            (okPath, properties, "Get", [.string("org.example.Nope"), .string("key")], PropBusAPI.standard("UnknownInterface")),
            (okPath, properties, "Get", [.string(values), .string("nothing")], PropBusAPI.standard("UnknownProperty")),
            (okPath, properties, "GetAll", [.string("org.example.Nope")], PropBusAPI.standard("UnknownInterface")),
            (PropBusAPI.rootPath + "/no/such/object", properties, "Get", [.string(values), .string("x")], PropBusAPI.standard("UnknownObject")),
            ("/", PropBusAPI.introspectable, "Introspect", [], nil),
            ("/elsewhere", manager, "ListProperties", [.string("")], PropBusAPI.standard("UnknownObject")),
            // Odd keys and names.
            (PropBusAPI.rootPath, manager, "CreateProperty", [.string(String(repeating: "k.", count: 5000) + "x"), .string("i"), .variant(.int32(0)), .vardict([:])], PropBusAPI.error("InvalidKey")),
            (PropBusAPI.rootPath, manager, "DeleteProperty", [.string("")], PropBusAPI.error("InvalidKey")),
            (okPath, values, "Reset", [.string("")], nil),
            (okPath, values, "GetWithRevision", [.string("no-such name")], nil),
            (PropBusAPI.rootPath, manager, "ListProperties", [.string("\u{1F600}..")], nil),
            (PropBusAPI.rootPath, manager, "CreateProperty", [.string("deep.value"), .string(String(repeating: "a", count: 33) + "i"),
                                                              .variant(.int32(0)), .vardict([:])], PropBusAPI.standard("InvalidArgs")),
            // Huge values: 3 MiB, over the 1 MiB value limit.
            (okPath, properties, "Set", [.string(values), .string("text"), .variant(.string(String(repeating: "z", count: 3 * 1024 * 1024)))], PropBusAPI.error("LimitsExceeded")),
            (PropBusAPI.rootPath, manager, "Apply", [.vardict(["ok.text": .string(String(repeating: "z", count: 3 * 1024 * 1024))]), .array(of: .string, [])], PropBusAPI.error("LimitsExceeded")),
        ]
        for call in calls {
            let name = try await errorName(path: call.path, interface: call.interface, member: call.member, call.arguments)
            let label = "\(call.path) \(call.interface ?? "-").\(call.member)(\(call.arguments.map(\.signature).joined()))"
            if let expected = call.expected {
                XCTAssertEqual(name, expected, label)
            } else {
                XCTAssertFalse(notAnswered.contains(name ?? ""), "\(label): not answered (\(name ?? ""))")
            }
        }
        try await assertStillServing()
        let text = try await client.get("ok.text")
        XCTAssertEqual(text, .string(""), "a refused huge value was stored")
        let keys = try await client.list().map(\.key).sorted()
        XCTAssertEqual(keys, ["ok.key", "ok.text"], "a malformed CreateProperty created something")
    }

    func testCallsWithoutAnInterfaceAreDispatchedByMemberName() async throws {
        try await client.create("ok.key", "i", default: .int32(42))
        let name = try await errorName(interface: nil, member: "ListProperties", [.string("")])
        XCTAssertNil(name, "ListProperties without an interface: \(name ?? "")")
        let unknown = try await errorName(interface: nil, member: "NoSuchMember", [])
        XCTAssertEqual(unknown, PropBusAPI.standard("UnknownMethod"))
        try await assertStillServing()
    }

    func testBusctlCallsWithWrongSignaturesGetErrors() async throws {
        try await client.create("ok.key", "i", default: .int32(42))
        let attempts: [[String]] = [
            ["call", PropBusAPI.busName, PropBusAPI.rootPath, PropBusAPI.manager, "CreateProperty", "s", "just.one"],
            ["call", PropBusAPI.busName, PropBusAPI.rootPath, PropBusAPI.manager, "DeleteProperty", "i", "5"],
            ["call", PropBusAPI.busName, PropBusAPI.rootPath, PropBusAPI.manager, "Nope"],
            ["set-property", PropBusAPI.busName, PropBusAPI.rootPath + "/ok", PropBusAPI.values, "key", "s", "text"],
            ["get-property", PropBusAPI.busName, PropBusAPI.rootPath + "/ok", PropBusAPI.values, "missing"],
            ["call", PropBusAPI.busName, PropBusAPI.rootPath + "/ok", PropBusAPI.values, "CompareAndSet", "sss", "key", "1", "2"],
        ]
        for arguments in attempts {
            let result = try await busctl(arguments)
            XCTAssertEqual(result.status, 1, "\(result)")
            XCTAssertFalse(result.timedOut, "\(result)")
        }
        try await assertStillServing()
    }

    func testClientThatFloodsAndVanishesDoesNotHurtTheDaemon() async throws {
        try await client.create("ok.key", "i", default: .int32(42))
        try await client.create("ok.count", "i", default: .int32(0))
        let rude = try await Client.connect(to: bus)
        _ = try await rude.record(pathNamespace: PropBusAPI.rootPath)
        for index in 0..<300 {
            let message = try Message.methodCall(destination: PropBusAPI.busName, path: PropBusAPI.rootPath + "/ok",
                                                 interface: PropBusAPI.properties, member: "Set")
            try message.append([.string(PropBusAPI.values), .string("count"), .variant(.int32(Int32(index)))])
            rude.connection.send(message)
            let bad = try Message.methodCall(destination: PropBusAPI.busName, path: PropBusAPI.rootPath,
                                             interface: PropBusAPI.manager, member: "CreateProperty")
            try bad.append([.int32(Int32(index))])
            rude.connection.send(bad)
        }
        // A reply after the flood proves the daemon read all of it: dbus-daemon may drop what a
        // vanished sender left unread, so "flush, then vanish" alone does not guarantee delivery.
        _ = try await rude.call(at: PropBusAPI.rootPath + "/ok", PropBusAPI.properties, "Get", [.string(PropBusAPI.values), .string("key")])
        for index in 0..<100 {
            let bad = try Message.methodCall(destination: PropBusAPI.busName, path: PropBusAPI.rootPath,
                                             interface: PropBusAPI.manager, member: "CreateProperty")
            try bad.append([.int32(Int32(index))])
            rude.connection.send(bad)
        }
        rude.connection.flush()
        rude.close()
        try await assertStillServing()
        // Every Set was delivered in order; the last one wins.
        _ = await eventually { (try? await self.client.get("ok.count")) == .int32(299) }
        let count = try await client.get("ok.count")
        XCTAssertEqual(count, .int32(299))
    }

    func testDeeplyNestedAndLargeContainerValuesRoundTrip() async throws {
        try await client.create("ok.key", "i", default: .int32(42))
        let nestedType = String(repeating: "a", count: 20) + "i"
        var nested = DBusValue.array(of: .int32, [.int32(1), .int32(2)])
        var elementType = DBusType.array(.int32)
        for _ in 1..<20 {
            nested = .array(of: elementType, [nested])
            elementType = .array(elementType)
        }
        try await client.create("big.nested", nestedType, default: nested)
        let nestedBack = try await client.get("big.nested")
        XCTAssertEqual(nestedBack, nested)
        let manyEntries = DBusValue.dictionary(key: .string, value: .variant, (0..<5000).map {
            DictionaryEntry(.string("entry\($0)"), .variant(.structure([.int32(Int32($0)), .string(String($0))])))
        })
        try await client.create("big.map", "a{sv}", default: .vardict([:]))
        try await client.set("big.map", manyEntries)
        let mapBack = try await client.get("big.map")
        XCTAssertEqual(mapBack, manyEntries)
        try await assertStillServing()
    }
}
