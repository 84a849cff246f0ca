import DBus
import Foundation
import XCTest

/// Access control (docs/security.md) on a system bus: `nobody` reads, but writes only what a property's `writers` grants;
/// secret values reach only their writers; root may do everything.
final class AccessControlTests: AccessControlTestCase, @unchecked Sendable {
    override func setUp() async throws {
        try await super.setUp()
        try await client.create("ui.switch.on", "b", default: .boolean(false))
        try await client.create("ui.switch.label", "s", default: .string("Off"))
    }

    // MARK: Reads

    func testNobodyReadsPublicPropertiesThroughEveryReadMethod() async throws {
        let get = try await busctlAsNobody(["get-property", PropBusAPI.busName, "/org/propbus/PropBus1/ui/switch", PropBusAPI.values, "on"])
        assertSucceeded(get)
        XCTAssertEqual(get.stdout, "b false\n")
        let getAll = try await gdbusAsNobody("/org/propbus/PropBus1/ui/switch", "org.freedesktop.DBus.Properties.GetAll", [PropBusAPI.values])
        assertSucceeded(getAll)
        XCTAssertTrue(getAll.stdout.contains("'on': <false>") && getAll.stdout.contains("'label': <'Off'>"), getAll.stdout)
        let list = try await propctlAsNobody(["list"])
        assertSucceeded(list)
        XCTAssertTrue(list.stdout.contains("ui.switch.on") && list.stdout.contains("ui.switch.label"), list.stdout)
        let revision = try await gdbusAsNobody("/org/propbus/PropBus1/ui/switch", "org.propbus.PropBus1.Values.GetWithRevision", ["on"])
        assertSucceeded(revision)
        let managed = try await gdbusAsNobody(PropBusAPI.rootPath, "org.freedesktop.DBus.ObjectManager.GetManagedObjects", [])
        assertSucceeded(managed)
        XCTAssertTrue(managed.stdout.contains("'on': <false>"), managed.stdout)
        let introspection = try await busctlAsNobody(["introspect", PropBusAPI.busName, "/org/propbus/PropBus1/ui/switch"])
        assertSucceeded(introspection)
        XCTAssertTrue(introspection.stdout.contains(".on"), introspection.stdout)
    }

    // MARK: Writes

    func testNobodysSetIsDeniedNamingTheKeyAndTheUidAndChangesNothing() async throws {
        let result = try await dbusSendAsNobody(["/org/propbus/PropBus1/ui/switch", "org.freedesktop.DBus.Properties.Set",
                                                 "string:\(PropBusAPI.values)", "string:on", "variant:boolean:true"])
        assertDenied(result, naming: "ui.switch.on")
        XCTAssertTrue(result.stderr.contains("uid 65534 may not write ui.switch.on; writers are root"), result.stderr)
        let value = try await client.get("ui.switch.on")
        XCTAssertEqual(value, .boolean(false))
    }

    func testPropctlAsNobodyReportsTheDenialAndExits1() async throws {
        let result = try await propctlAsNobody(["set", "ui.switch.on", "true"])
        XCTAssertEqual(result.status, 1, "\(result)")
        XCTAssertTrue(result.stderr.contains("\(Self.accessDenied): uid 65534 may not write ui.switch.on"), result.stderr)
    }

    func testEveryWriteMethodDeniesNobody() async throws {
        let path = "/org/propbus/PropBus1/ui/switch"
        assertDenied(try await gdbusAsNobody(path, "org.propbus.PropBus1.Values.Reset", ["on"]), naming: "ui.switch.on")
        let revision = try await client.getWithRevision("ui.switch.on").revision
        assertDenied(try await gdbusAsNobody(path, "org.propbus.PropBus1.Values.CompareAndSet", ["on", "uint64 \(revision)", "<true>"]),
                     naming: "ui.switch.on")
        assertDenied(try await gdbusAsNobody(PropBusAPI.rootPath, "org.propbus.PropBus1.Manager.DeleteProperty", ["ui.switch.on"]),
                     naming: "ui.switch.on")
        assertDenied(try await gdbusAsNobody(PropBusAPI.rootPath, "org.propbus.PropBus1.Manager.CreateProperty",
                                             ["ui.switch.new", "i", "<0>", "@a{sv} {}"]), naming: "ui.switch.new")
        // Re-registering an existing key (here to widen its own writers) needs writer rights on it.
        assertDenied(try await gdbusAsNobody(PropBusAPI.rootPath, "org.propbus.PropBus1.Manager.CreateProperty",
                                             ["ui.switch.on", "b", "<false>", "{'writers': <['nobody']>}"]), naming: "ui.switch.on")
        assertDenied(try await gdbusAsNobody(PropBusAPI.rootPath, "org.propbus.PropBus1.Manager.Apply",
                                             ["@a{sv} {}", "['ui.switch.label']"]), naming: "ui.switch.label")
        let listed = try await client.list()
        XCTAssertEqual(listed.map(\.key), ["ui.switch.label", "ui.switch.on"])
        XCTAssertEqual(listed.map { $0.metadata["is_set"] }, [.boolean(false), .boolean(false)])
        XCTAssertEqual(listed.first { $0.key == "ui.switch.on" }?.metadata["writers"], nil)
        let after = try await client.getWithRevision("ui.switch.on").revision
        XCTAssertEqual(after, revision)
    }

    func testApplyWithOneDeniedKeyChangesNothing() async throws {
        try await client.create("ui.switch.mine", "i", default: .int32(0), options: ["writers": .array(of: .string, [.string("nobody")])])
        let result = try await gdbusAsNobody(PropBusAPI.rootPath, "org.propbus.PropBus1.Manager.Apply",
                                             ["{'ui.switch.mine': <7>, 'ui.switch.on': <true>}", "@as []"])
        assertDenied(result, naming: "ui.switch.on")
        let mine = try await client.get("ui.switch.mine")
        let on = try await client.get("ui.switch.on")
        XCTAssertEqual(mine, .int32(0), "the allowed key of a denied Apply changed")
        XCTAssertEqual(on, .boolean(false))
        // The same Apply without the denied key goes through.
        assertSucceeded(try await gdbusAsNobody(PropBusAPI.rootPath, "org.propbus.PropBus1.Manager.Apply",
                                                ["{'ui.switch.mine': <7>}", "@as []"]))
        let applied = try await client.get("ui.switch.mine")
        XCTAssertEqual(applied, .int32(7))
    }

    func testWritersNamingNobodyLetNobodyWriteThatPropertyOnly() async throws {
        try await client.create("ui.switch.mine", "i", default: .int32(0), options: ["writers": .array(of: .string, [.string("nobody")])])
        assertSucceeded(try await setAsNobody("ui.switch.mine", "int32 5"))
        let value = try await client.get("ui.switch.mine")
        XCTAssertEqual(value, .int32(5))
        assertSucceeded(try await gdbusAsNobody("/org/propbus/PropBus1/ui/switch", "org.propbus.PropBus1.Values.Reset", ["mine"]))
        let revision = try await client.getWithRevision("ui.switch.mine").revision
        assertSucceeded(try await gdbusAsNobody("/org/propbus/PropBus1/ui/switch", "org.propbus.PropBus1.Values.CompareAndSet",
                                                ["mine", "uint64 \(revision)", "<int32 9>"]))
        assertSucceeded(try await propctlAsNobody(["set", "ui.switch.mine", "11"]))
        let final = try await client.get("ui.switch.mine")
        XCTAssertEqual(final, .int32(11))
        assertDenied(try await setAsNobody("ui.switch.on", "true"), naming: "ui.switch.on")
    }

    func testWritersByGroupAndByUidLetMatchingCallersWrite() async throws {
        try await client.create("g.byGroup", "i", default: .int32(0), options: ["writers": .array(of: .string, [.string("@nogroup")])])
        try await client.create("g.byUid", "i", default: .int32(0), options: ["writers": .array(of: .string, [.string("65534")])])
        try await client.create("g.unknown", "i", default: .int32(0), options: ["writers": .array(of: .string, [.string("no-such-user-xyz"), .string("@no-such-group-xyz")])])
        assertSucceeded(try await setAsNobody("g.byGroup", "int32 1"))
        assertSucceeded(try await setAsNobody("g.byUid", "int32 2"))
        assertDenied(try await setAsNobody("g.unknown", "int32 3"), naming: "g.unknown")
    }

    func testWritersNarrowingTheDefaultStillLeaveRootAllRights() async throws {
        try await client.create("g.closed", "i", default: .int32(0), options: ["writers": .array(of: .string, [])])
        try await client.set("g.closed", .int32(1))
        try await client.apply(set: [("g.closed", .int32(2))])
        try await client.reset("g.closed")
        try await client.delete("g.closed")
        let listed = try await client.list()
        XCTAssertFalse(listed.contains { $0.key == "g.closed" })
    }

    func testAPropertyWhoseWritersIncludeNobodyCanBeRedefinedAndDeletedByNobody() async throws {
        try await client.create("g.mine", "i", default: .int32(0), options: ["writers": .array(of: .string, [.string("nobody")])])
        assertSucceeded(try await gdbusAsNobody(PropBusAPI.rootPath, "org.propbus.PropBus1.Manager.CreateProperty",
                                                ["g.mine", "i", "<5>", "{'writers': <['nobody']>, 'description': <'mine'>}"]))
        let value = try await client.get("g.mine")
        XCTAssertEqual(value, .int32(5))
        assertSucceeded(try await gdbusAsNobody(PropBusAPI.rootPath, "org.propbus.PropBus1.Manager.DeleteProperty", ["g.mine"]))
        let listed = try await client.list()
        XCTAssertFalse(listed.contains { $0.key == "g.mine" })
    }

    // MARK: Secrets

    func testSecretPropertyIsHiddenFromNobodyButReadableByRoot() async throws {
        try await client.create("ui.switch.pin", "s", default: .string("1234"), options: ["secret": .boolean(true)])
        let get = try await dbusSendAsNobody(["/org/propbus/PropBus1/ui/switch", "org.freedesktop.DBus.Properties.Get",
                                              "string:\(PropBusAPI.values)", "string:pin"])
        assertDenied(get, naming: "ui.switch.pin")
        XCTAssertFalse(get.stdout.contains("1234"))
        assertDenied(try await gdbusAsNobody("/org/propbus/PropBus1/ui/switch", "org.propbus.PropBus1.Values.GetWithRevision", ["pin"]),
                     naming: "ui.switch.pin")
        let getAll = try await gdbusAsNobody("/org/propbus/PropBus1/ui/switch", "org.freedesktop.DBus.Properties.GetAll", [PropBusAPI.values])
        assertSucceeded(getAll)
        XCTAssertTrue(getAll.stdout.contains("'on'") && !getAll.stdout.contains("pin") && !getAll.stdout.contains("1234"), getAll.stdout)
        let list = try await propctlAsNobody(["list"])
        assertSucceeded(list)
        XCTAssertTrue(list.stdout.contains("ui.switch.on") && !list.stdout.contains("pin") && !list.stdout.contains("1234"), list.stdout)
        let managed = try await gdbusAsNobody(PropBusAPI.rootPath, "org.freedesktop.DBus.ObjectManager.GetManagedObjects", [])
        assertSucceeded(managed)
        XCTAssertTrue(managed.stdout.contains("'on'") && !managed.stdout.contains("1234"), managed.stdout)
        // Introspection still names it, with its type.
        let xml = try await gdbusAsNobody("/org/propbus/PropBus1/ui/switch", "\(PropBusAPI.introspectable).Introspect", [])
        XCTAssertTrue(xml.stdout.replacingOccurrences(of: "\\\"", with: "\"").contains("<property name=\"pin\" type=\"s\""), xml.stdout)

        let asRoot = try await client.get("ui.switch.pin")
        XCTAssertEqual(asRoot, .string("1234"))
        let all = try await client.getAll(group: "ui.switch")
        XCTAssertEqual(all["pin"], .string("1234"))
        let listed = try await client.list()
        XCTAssertEqual(listed.first { $0.key == "ui.switch.pin" }?.value, .string("1234"))
    }

    func testSecretIsReadableByItsWriters() async throws {
        try await client.create("ui.switch.pin", "s", default: .string("1234"),
                                options: ["secret": .boolean(true), "writers": .array(of: .string, [.string("nobody")])])
        let get = try await getAsNobody("ui.switch.pin")
        assertSucceeded(get)
        XCTAssertTrue(get.stdout.contains("'1234'"), get.stdout)
        let list = try await propctlAsNobody(["get", "ui.switch.pin"])
        XCTAssertEqual(list.stdout, "1234\n", "\(list)")
    }

    func testSecretChangesAreAnnouncedByNameOnlyAndNewSecretsAreLeftOutOfInterfacesAdded() async throws {
        try await client.create("ui.switch.pin", "s", default: .string("1234"), options: ["secret": .boolean(true)])
        let changes = try await client.recordChanges(ofGroup: "ui.switch")
        let added = try await client.record(path: PropBusAPI.rootPath, interface: PropBusAPI.objectManager, member: "InterfacesAdded")
        try await client.set("ui.switch.pin", .string("9876"))
        try await client.set("ui.switch.on", .boolean(true))
        let signals = await changes.wait(count: 2)
        XCTAssertEqual(signals.map(\.changed), [[:], ["on": .boolean(true)]])
        XCTAssertEqual(signals.map(\.invalidated), [["pin"], []])

        try await client.create("vault.key", "s", default: .string("hunter2"), options: ["secret": .boolean(true)])
        try await client.create("vault.name", "s", default: .string("main"))
        let interfaces = await added.wait(count: 1)
        XCTAssertEqual(interfaces.count, 1)
        XCTAssertFalse("\(interfaces)".contains("hunter2"), "InterfacesAdded carried a secret: \(interfaces)")
        let introspection = try await client.introspect("/org/propbus/PropBus1/ui/switch")
        XCTAssertTrue(introspection.contains("<property name=\"pin\" type=\"s\" access=\"readwrite\">"), introspection)
        XCTAssertTrue(introspection.contains("value=\"invalidates\""), introspection)
    }

    // MARK: Root and the session default

    func testRootWritesSucceed() async throws {
        try await client.set("ui.switch.on", .boolean(true))
        try await client.apply(set: [("ui.switch.label", .string("On"))])
        let revision = try await client.getWithRevision("ui.switch.on").revision
        try await client.compareAndSet("ui.switch.on", revision: revision, .boolean(false))
        try await client.reset("ui.switch.label")
        try await client.delete("ui.switch.label")
        let listed = try await client.list()
        XCTAssertEqual(listed.map(\.key), ["ui.switch.on"])
    }

    func testWithoutSystemAccessEveryoneMayDoEverything() async throws {
        try await client.create("ui.switch.pin", "s", default: .string("1234"), options: ["secret": .boolean(true)])
        try await restartDaemon(arguments: [])
        assertSucceeded(try await setAsNobody("ui.switch.on", "true"))
        let value = try await client.get("ui.switch.on")
        XCTAssertEqual(value, .boolean(true))
        let pin = try await getAsNobody("ui.switch.pin")
        assertSucceeded(pin)
        XCTAssertTrue(pin.stdout.contains("'1234'"), pin.stdout)
        assertSucceeded(try await gdbusAsNobody(PropBusAPI.rootPath, "org.propbus.PropBus1.Manager.CreateProperty",
                                                ["nobodys.own", "i", "<0>", "@a{sv} {}"]))
        assertSucceeded(try await gdbusAsNobody(PropBusAPI.rootPath, "org.propbus.PropBus1.Manager.DeleteProperty", ["ui.switch.label"]))
    }

    func testDaemonHelpDescribesSystemAccess() async throws {
        let help = try await runCommand(BuildProducts.propbusd, ["--help"], environment: bus.environment)
        XCTAssertEqual(help.status, 0, "\(help)")
        XCTAssertTrue(help.stdout.contains("--system-access") && help.stdout.contains("group propbus"), help.stdout)
        let valued = try await runCommand(BuildProducts.propbusd, ["--system-access=yes"], environment: bus.environment)
        XCTAssertEqual(valued.status, 64, "\(valued)")
    }

    // MARK: Credentials

    func testCallsOfANewConnectionWaitForItsCredentialsAndKeepTheirOrder() async throws {
        try await client.create("order.n", "i", default: .int32(0))
        let fresh = try await Client.connect(to: bus)
        defer { fresh.close() }
        // Pipelined on the connection's queue: every call is sent before the first reply, so all
        // but the first wait for the credential lookup the first one starts.
        let count = 40
        let replies: [Result<[DBusValue], DBusError>] = await withCheckedContinuation { continuation in
            let connection = fresh.connection
            connection.queue.async {
                var replies: [Result<[DBusValue], DBusError>] = []
                for i in 1...count {
                    let set = try! Message.methodCall(destination: PropBusAPI.busName, path: "/org/propbus/PropBus1/order",
                                                      interface: PropBusAPI.properties, member: "Set")
                    try! set.append([.string(PropBusAPI.values), .string("n"), .variant(.int32(Int32(i)))])
                    connection.call(set) { _ in }
                    let get = try! Message.methodCall(destination: PropBusAPI.busName, path: "/org/propbus/PropBus1/order",
                                                      interface: PropBusAPI.properties, member: "Get")
                    try! get.append([.string(PropBusAPI.values), .string("n")])
                    connection.call(get) { result in
                        replies.append(result.flatMap { message in Result { () throws(DBusError) in try message.arguments() } })
                        if replies.count == count { continuation.resume(returning: replies) }
                    }
                }
            }
        }
        let values = replies.map { (try? $0.get())?.first }
        XCTAssertEqual(values, (1...count).map { .variant(.int32(Int32($0))) }, "a Get overtook its Set, or a call failed")
    }
}
