import DBus
import EtcdTestSupport
import Foundation
import PropBus
import XCTest

/// Two simulated hosts (each its own bus, daemon and state directory) sharing one real etcd
/// member on loopback: the daemon side of the fleet end to end. The multi-host suite of the
/// issue lives in its own files; these pin the basic path.
final class FleetDaemonTests: XCTestCase {
    private var cluster: EtcdCluster!
    private var hosts: [FleetHost] = []

    override func setUp() async throws {
        try await super.setUp()
        cluster = try EtcdCluster()
    }

    override func tearDown() async throws {
        for host in hosts { await host.tearDown() }
        hosts = []
        cluster?.stop()
        cluster = nil
        try await super.tearDown()
    }

    private func startHosts(_ names: [String]) async throws -> [FleetHost] {
        for name in names {
            let host = try await FleetHost.make(name: name, endpoints: cluster.endpoints, prefix: "fleet-test")
            hosts.append(host)
            try await host.start()
        }
        return hosts
    }

    func testSetOnOneHostArrivesAsPropertiesChangedOnTheOther() async throws {
        let hosts = try await startHosts(["a", "b"])
        let (a, b) = (hosts[0], hosts[1])
        try await a.client.create("settings.volume", "i", default: .int32(5), options: ["scope": .string("fleet")])
        let defined = await eventually(timeout: 10) { (try? await b.client.list(prefix: "settings.").map(\.key)) == ["settings.volume"] }
        XCTAssertTrue(defined, "the definition did not reach b; stderr: \(b.stderr)")
        let changes = try await b.client.recordChanges(ofGroup: "settings")
        try await a.client.set("settings.volume", .int32(42))
        // The writer's reply comes after etcd accepted and its own mirror committed.
        let written = try await a.client.get("settings.volume")
        XCTAssertEqual(written, .int32(42))
        let received = await changes.wait { signals in signals.contains { $0.changed["volume"] == .int32(42) } }
        XCTAssertTrue(received.contains { $0.changed["volume"] == .int32(42) }, "b saw: \(received)")
        let mirrored = try await b.client.get("settings.volume")
        XCTAssertEqual(mirrored, .int32(42))
        // etcd_revision in ListProperties: the same etcd revision on both hosts.
        let revisionA = try await a.client.list(prefix: "settings.").first?.metadata["etcd_revision"]
        let revisionB = try await b.client.list(prefix: "settings.").first?.metadata["etcd_revision"]
        XCTAssertNotNil(revisionA)
        XCTAssertEqual(revisionA, revisionB)
    }

    func testLocalKeysStayLocalAndAFleetKeyCanOnlyBeWrittenWhileEtcdAnswers() async throws {
        let hosts = try await startHosts(["a", "b"])
        let (a, b) = (hosts[0], hosts[1])
        try await a.client.create("ui.theme", "s", default: .string("light"))
        try await a.client.create("fleet.motd", "s", default: .string(""), options: ["scope": .string("fleet")])
        // Barrier: the fleet key created after the local one has arrived, so the local one
        // would have too.
        try await a.client.set("fleet.motd", .string("hello"))
        let arrived = await b.waitFor("fleet.motd", .string("hello"))
        XCTAssertTrue(arrived)
        let leaked = try await b.client.list(prefix: "ui.")
        XCTAssertEqual(leaked.count, 0, "a local key left its host")

        cluster.stop()
        do {
            try await a.client.set("fleet.motd", .string("offline"))
            XCTFail("a fleet write succeeded without etcd")
        } catch let error as DBusError {
            XCTAssertEqual(error.name, "org.propbus.PropBus1.Error.Unavailable", error.message)
            XCTAssertTrue(error.message.contains("fleet.motd"), error.message)
            XCTAssertTrue(error.message.contains("127.0.0.1"), "names the endpoints: \(error.message)")
        }
        // Reads serve the mirror, local keys are written as ever, and FleetState says it.
        let mirror = try await a.client.get("fleet.motd")
        XCTAssertEqual(mirror, .string("hello"))
        try await a.client.set("ui.theme", .string("dark"))
        let local = try await a.client.get("ui.theme")
        XCTAssertEqual(local, .string("dark"))
        let unavailable = await a.waitForFleetState("unavailable")
        XCTAssertTrue(unavailable)
    }

    func testABindingsFirstSyncIntoAFleetKeyReachesTheOtherHostAndFleetToLocalFollows() async throws {
        let hosts = try await startHosts(["a", "b"])
        let (a, b) = (hosts[0], hosts[1])
        let fleet: [String: DBusValue] = ["scope": .string("fleet")]
        try await a.client.create("f.source", "i", default: .int32(0), options: fleet.merging(["value": .int32(5)]) { $1 })
        try await a.client.create("f.copy", "i", default: .int32(0), options: fleet)
        try await a.client.create("l.copy", "i", default: .int32(0))
        let persistent: [String: DBusValue] = ["persistent": .boolean(true)]
        try await a.client.call(PropBusAPI.manager, "Bind", [.string("f.copy"), .string("f.source"), .vardict(persistent)])
        try await a.client.call(PropBusAPI.manager, "Bind", [.string("l.copy"), .string("f.source"), .vardict(persistent)])
        // The first sync wrote f.copy: through etcd, so b has it too.
        let synced = await b.waitFor("f.copy", .int32(5))
        let seen = try? await b.client.get("f.copy")
        XCTAssertTrue(synced, "b: \(String(describing: seen))")
        // A write on b (which has no bindings) reaches a's local key, and no fleet↔fleet
        // propagation runs on a for it.
        try await b.client.set("f.source", .int32(8))
        let followed = await a.waitFor("l.copy", .int32(8))
        XCTAssertTrue(followed)
        let copy = try await a.client.get("f.copy")
        XCTAssertEqual(copy, .int32(5), "fleet↔fleet bindings run on the writing host only")
    }

    func testAHostBootsOfflineServingItsMirror() async throws {
        let hosts = try await startHosts(["a"])
        let a = hosts[0]
        try await a.client.create("fleet.mode", "s", default: .string("day"), options: ["scope": .string("fleet")])
        try await a.client.set("fleet.mode", .string("night"))
        cluster.stop()
        // The restart must own the name without etcd, and read what the mirror committed.
        await a.stop()
        try await a.start(connected: false)
        let value = try await a.client.get("fleet.mode")
        XCTAssertEqual(value, .string("night"))
        let listed = try await a.client.list(prefix: "fleet.")
        XCTAssertNotNil(listed.first?.metadata["etcd_revision"], "the etcd revision survives the restart")
        let unavailable = await a.waitForFleetState("unavailable")
        let state = (try? await a.fleetState()) ?? "?"
        XCTAssertTrue(unavailable, "FleetState: \(state)")
    }

    func testWithoutFleetTheStateIsOffAndScopeFleetIsStillRecorded() async throws {
        let bus = try await PrivateBus.start()
        let client = try await Client.connect(to: bus)
        let daemon = try await Daemon.start(on: bus, arguments: ["--in-memory"], watcher: client)
        defer { client.close() }
        let state = try await client.call(PropBusAPI.properties, "Get", [.string(PropBusAPI.manager), .string("FleetState")])
        XCTAssertEqual(state.first?.unwrappingVariantOnce, .string("off"))
        let revision = try await client.call(PropBusAPI.properties, "Get", [.string(PropBusAPI.manager), .string("FleetRevision")])
        XCTAssertEqual(revision.first?.unwrappingVariantOnce, .uint64(0))
        try await client.create("f.x", "b", default: .boolean(false), options: ["scope": .string("fleet")])
        try await client.set("f.x", .boolean(true))
        let listed = try await client.list(prefix: "f.")
        XCTAssertEqual(listed.first?.metadata["scope"], .string("fleet"))
        await daemon.stop()
        await bus.stop()
    }
}
