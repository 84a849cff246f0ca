import DBus
import Foundation
import Observation
import PropBus
import PropBusClient
import XCTest

/// A view model of the seeds: a switch that follows a defaults key, and a text with a transform.
@MainActor @Observable
final class SwitchModel {
    var isOn = false
    var volumeText = ""
}

/// The client library's channels between a key and an `@Observable` model, against the real
/// daemon: the seeds' defaults sequence, exactly one `Set` per model write and none per bus
/// change (counted by a bus monitor), and transforms both ways.
final class PropBusClientChannelTests: ClientLibraryTestCase, @unchecked Sendable {
    private var monitor: ChildProcess?
    private var markerValue: Int32 = 0

    override func setUp() async throws {
        try await super.setUp()
        try await client.create("test.marker.tick", "i", default: .int32(0))
    }

    override func tearDown() async throws {
        await monitor?.stop()
        try await super.tearDown()
    }

    @MainActor
    func testSeedsDefaultsSequenceTwoModelChangesThenOneFromAnotherProcessReachTheModel() async throws {
        try await client.create("settings.someBoolKey", "b", default: .boolean(false))
        let model = SwitchModel()
        model.isOn = true
        let channel = library.channel(library.property("settings.someBoolKey", as: Bool.self))
        let binding = channel.bind(\.isOn, of: model)
        defer { binding.cancel() }
        let startedFromBus = await onMain { model.isOn == false }
        XCTAssertTrue(startedFromBus, "the key's value wins at the start")

        model.isOn = true
        let first = await onMain { (try? await self.client.get("settings.someBoolKey")) == .boolean(true) }
        XCTAssertTrue(first, "the first tap reached the key")
        model.isOn = false
        let second = await onMain { (try? await self.client.get("settings.someBoolKey")) == .boolean(false) }
        XCTAssertTrue(second, "the second tap reached the key")

        _ = try await busctl(["set-property", PropBusAPI.busName, Key.objectPath(ofGroup: "settings"),
                              PropBusAPI.values, "someBoolKey", "b", "true"])
        let reached = await onMain { model.isOn == true }
        XCTAssertTrue(reached, "a change made in another process after two taps must reach the switch")
    }

    @MainActor
    func testOneSetPerModelWriteAndNonePerBusChangeCountedOnTheBus() async throws {
        try await client.create("settings.someBoolKey", "b", default: .boolean(false))
        try await startMonitor()
        let model = SwitchModel()
        let binding = library.channel(library.property("settings.someBoolKey", as: Bool.self)).bind(\.isOn, of: model)
        defer { binding.cancel() }
        try await monitorBarrier()
        XCTAssertEqual(setsBy(library.uniqueName), 0, "binding to a model that already agrees sends nothing")

        for value in [true, false, true] {
            model.isOn = value
            let arrived = await onMain { (try? await self.client.get("settings.someBoolKey")) == .boolean(value) }
            XCTAssertTrue(arrived, "model write \(value) did not reach the key (the model shows \(model.isOn))")
        }
        model.isOn = true  // the value the key holds: no write
        for value in [false, true, false] {
            try await client.set("settings.someBoolKey", .boolean(value))
            let followed = await onMain { model.isOn == value }
            XCTAssertTrue(followed, "the model follows the bus to \(value)")
        }
        try await monitorBarrier()
        XCTAssertEqual(setsBy(library.uniqueName), 3, "three model writes, three Sets; the bus's changes sent none back")
        XCTAssertEqual(model.isOn, false)
    }

    @MainActor
    func testInterleavedChangesFromBothSidesLeaveNeitherSideStale() async throws {
        try await client.create("settings.volume", "i", default: .int32(0))
        let model = SwitchModel()
        let binding = library.channel(library.property("settings.volume", as: Int32.self))
            .bind(\.volumeText, of: model, toBus: { Int32($0) ?? -1 }, fromBus: { String($0) })
        defer { binding.cancel() }
        let other = try await Client.connect(to: bus)
        defer { other.close() }
        for round in 1...20 {
            // A model write and another process's write race; whichever the daemon takes last
            // must end on both sides.
            model.volumeText = String(round * 2)
            async let remote: Void = other.set("settings.volume", .int32(Int32(round * 2 + 1)))
            try await remote
            var stored = DBusValue.int32(-2)
            let agreed = await onMain {
                stored = (try? await self.client.get("settings.volume")) ?? .int32(-2)
                return stored == .int32(Int32(model.volumeText) ?? -3)
            }
            XCTAssertTrue(agreed, "round \(round): the model shows \(model.volumeText), the key holds \(stored)")
        }
    }

    @MainActor
    func testTransformsBothWays() async throws {
        try await client.create("settings.volume", "i", default: .int32(7))
        let model = SwitchModel()
        let binding = library.channel(library.property("settings.volume", as: Int32.self))
            .bind(\.volumeText, of: model, toBus: { Int32($0) ?? 0 }, fromBus: { "level \($0)" })
        defer { binding.cancel() }
        let started = await onMain { model.volumeText == "level 7" }
        XCTAssertTrue(started, "fromBus at the start: \(model.volumeText)")
        try await client.set("settings.volume", .int32(9))
        let followed = await onMain { model.volumeText == "level 9" }
        XCTAssertTrue(followed, "fromBus on a change: \(model.volumeText)")
        model.volumeText = "12"
        let written = await onMain { (try? await self.client.get("settings.volume")) == .int32(12) }
        XCTAssertTrue(written, "toBus on a model write")
        // The daemon's value comes back through fromBus only if it differs from what was written.
        XCTAssertEqual(model.volumeText, "12")
    }

    /// `eventually` on the main actor, where the model lives.
    @MainActor
    private func onMain(timeout: TimeInterval = 5, _ condition: @MainActor () async -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        repeat {
            if await condition() { return true }
            try? await Task.sleep(nanoseconds: 5_000_000)
        } while Date() < deadline
        return await condition()
    }

    // MARK: Counting Sets on the bus

    private func startMonitor() async throws {
        monitor = try ChildProcess("dbus-monitor", ["--address", bus.address,
                                                    "type='method_call',interface='org.freedesktop.DBus.Properties',member='Set'"],
                                   environment: bus.environment)
        // The monitor is attached once a marker Set shows in its output; the ones sent before
        // it attached are simply not there, so try again.
        for _ in 0..<50 {
            if (try? await monitorBarrier(timeout: 0.2)) != nil { return }
        }
        try await monitorBarrier()
    }

    /// Every Set sent before this call is in the monitor's output once this returns: the
    /// monitor prints messages in the order the bus routed them, and the marker's Set is last.
    private func monitorBarrier(timeout: TimeInterval = 10) async throws {
        markerValue += 1
        let before = setsBy(client.connection.uniqueName)
        let (path, name) = PropBusAPI.locate("test.marker.tick")
        _ = try await client.call(at: path, PropBusAPI.properties, "Set",
                                  [.string(PropBusAPI.values), .string(name), .variant(.int32(markerValue))])
        let seen = await eventually(timeout: timeout) { self.setsBy(self.client.connection.uniqueName) > before }
        guard seen else { throw TestSetupError("dbus-monitor never showed the marker Set: \(monitor?.stdout ?? "")") }
    }

    private func setsBy(_ sender: String) -> Int {
        (monitor?.stdout ?? "").split(separator: "\n").filter {
            $0.hasPrefix("method call") && $0.contains(" sender=\(sender) ") && $0.contains("member=Set")
        }.count
    }
}
