import DBus
import Foundation
import PropBus
import PropBusClient
import XCTest

/// The Swift client library's typed properties against the real daemon on a private bus:
/// values in the daemon's order without duplicates, writes, compare-and-set, reset, a type
/// mismatch reported, and the same sequence going on across a kill -9 and restart.
final class PropBusClientPropertyTests: ClientLibraryTestCase, @unchecked Sendable {

    func testValuesFollowThreeWritersInTheDaemonsOrderWithoutDuplicates() async throws {
        try await client.create("settings.volume", "i", default: .int32(-1))
        let volume = library.property("settings.volume", as: Int32.self)
        let values = StreamRecorder(volume.values)
        let raw = try await client.recordChanges(ofGroup: "settings")
        await values.wait { $0 == [-1] }
        XCTAssertEqual(values.elements, [-1], "the current value comes first")

        // 1,000 changes from three connections, as fast as each gets its replies.
        var writers: [Client] = []
        for _ in 0..<3 { writers.append(try await Client.connect(to: bus)) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, writer) in writers.enumerated() {
                group.addTask {
                    for step in 0..<334 where index * 334 + step < 1000 {
                        try await writer.set("settings.volume", .int32(Int32(index * 10_000 + step)))
                    }
                }
            }
            try await group.waitForAll()
        }
        for writer in writers { writer.close() }
        guard case .int32(let final) = try await client.get("settings.volume") else { return XCTFail("not an i") }
        try await client.barrier()
        let announced = raw.signals.compactMap { signal -> Int32? in
            if case .int32(let value)? = signal.changed["volume"] { value } else { nil }
        }
        XCTAssertEqual(announced.last, final)
        let seen = await values.wait { $0.last == final }
        XCTAssertEqual(Array(seen.dropFirst()), announced, "every announced change, in order, and nothing else")
        XCTAssertEqual(Set(seen).count, seen.count, "no value twice")
        for writer in 0..<3 {
            let own = seen.filter { $0 >= 0 && Int($0) / 10_000 == writer }
            XCTAssertEqual(own, own.sorted(), "writer \(writer)'s changes in the order it made them")
        }
        XCTAssertEqual(volume.current, final)
        XCTAssertEqual(volume.state, .live)
    }

    func testValuesOfATemporaryPropertyGoOn() async throws {
        try await client.create("settings.level", "i", default: .int32(0))
        // Nobody holds the property but its sequence.
        let values = StreamRecorder(library.property("settings.level", as: Int32.self).values)
        await values.wait { $0 == [0] }
        try await client.set("settings.level", .int32(1))
        let seen = await values.wait { $0.last == 1 }
        XCTAssertEqual(seen, [0, 1])
    }

    func testSetCompareAndSetAndResetRoundTrip() async throws {
        try await client.create("settings.name", "s", default: .string("default"))
        let name = library.property("settings.name", as: String.self)
        try await name.set("first")
        XCTAssertEqual(name.current, "first", "the signal precedes the reply")
        let stored = try await client.get("settings.name")
        XCTAssertEqual(stored, .string("first"))

        let (value, revision) = try await name.valueWithRevision()
        XCTAssertEqual(value, "first")
        let next = try await name.compareAndSet(revision: revision, to: "second")
        XCTAssertGreaterThan(next, revision)
        XCTAssertEqual(name.current, "second")
        do {
            try await name.compareAndSet(revision: revision, to: "third")
            XCTFail("a stale revision was accepted")
        } catch {
            XCTAssertTrue(error.isConflict, "\(error)")
            XCTAssertEqual(error.name, "org.propbus.PropBus1.Error.Conflict")
        }
        try await name.reset()
        XCTAssertEqual(name.current, "default")
        let read = try await name.value()
        XCTAssertEqual(read, "default")
    }

    func testContainerTypesDecode() async throws {
        try await client.create("settings.levels", "a{sd}", default: .dictionary(key: .string, value: .double, []))
        try await client.create("settings.tags", "as", default: .array(of: .string, []))
        let levels = library.property("settings.levels", as: [String: Double].self)
        let tags = library.property("settings.tags", as: [String].self)
        try await levels.set(["bass": 0.5, "treble": -1])
        try await tags.set(["a", "b"])
        XCTAssertEqual(levels.current, ["bass": 0.5, "treble": -1])
        XCTAssertEqual(tags.current, ["a", "b"])
        let stored = try await client.get("settings.tags")
        XCTAssertEqual(stored, .array(of: .string, [.string("a"), .string("b")]))
    }

    func testAStructOfYourOwnRoundTrips() async throws {
        try await client.create("ui.origin", "(ii)", default: .structure([.int32(0), .int32(0)]))
        let origin = library.property("ui.origin", as: Point.self)
        try await origin.set(Point(x: 3, y: -4))
        XCTAssertEqual(origin.current, Point(x: 3, y: -4))
        let stored = try await client.get("ui.origin")
        XCTAssertEqual(stored, .structure([.int32(3), .int32(-4)]))
        let bytes = library.property("ui.blob", as: [UInt8].self)
        try await client.create("ui.blob", "ay", default: .bytes([1, 2]))
        let read = try await bytes.value()
        XCTAssertEqual(read, [1, 2])
    }

    func testAKeyCreatedLaterGoesLiveAndADeletedOneStale() async throws {
        let later = library.property("later.count", as: Int32.self)
        let states = StreamRecorder(later.states)
        let values = StreamRecorder(later.values)
        try await client.barrier()
        let before = await states.wait { $0.last == .stale }
        XCTAssertEqual(before.last, .stale, "a key that does not exist is stale")
        // A new group: announced by InterfacesAdded alone.
        try await client.create("later.count", "i", default: .int32(5))
        let appeared = await values.wait { $0 == [5] }
        XCTAssertEqual(appeared, [5])
        await states.wait { $0.last == .live }
        XCTAssertEqual(later.state, .live)
        // A second key of the group: its PropertiesChanged.
        let second = library.property("later.other", as: String.self)
        try await client.create("later.other", "s", default: .string("x"))
        _ = await eventually { second.current == "x" }
        XCTAssertEqual(second.current, "x")
        try await client.delete("later.count")
        let gone = await states.wait { $0.last == .stale }
        XCTAssertEqual(gone.last, .stale, "a deleted key is stale")
    }

    func testTypeMismatchIsReportedNotCrashedOn() async throws {
        try await client.create("settings.volume", "s", default: .string("loud"))
        let volume = library.property("settings.volume", as: Int32.self)
        let states = StreamRecorder(volume.states)
        let arrived = await states.wait { $0.contains(.typeMismatch(expected: "i", actual: "s")) }
        XCTAssertEqual(arrived.last, .typeMismatch(expected: "i", actual: "s"))
        XCTAssertNil(volume.current)
        do {
            try await volume.set(3)
            XCTFail("the daemon took an i for an s key")
        } catch {
            // The library refuses it as it refuses the read, before anything is sent.
            XCTAssertEqual(error.name, PropBusClientError.Name.typeMismatch, "\(error)")
        }
        do {
            try await volume.compareAndSet(revision: 1, to: 3)
            XCTFail("the daemon took an i for an s key")
        } catch {
            XCTAssertEqual(error.name, PropBusClientError.Name.typeMismatch, "\(error)")
        }
    }

    func testAWriteBeforeTheFirstReadOfAKeyOfAnotherTypeIsTypeMismatchToo() async throws {
        try await client.create("settings.level", "s", default: .string("loud"))
        let level = library.property("settings.level", as: Int32.self)
        do {
            try await level.set(3)
            XCTFail("the daemon took an i for an s key")
        } catch {
            XCTAssertEqual(error.name, PropBusClientError.Name.typeMismatch, "\(error)")
        }
        let value = try await client.get("settings.level")
        XCTAssertEqual(value, .string("loud"))
    }

    func testStaleWithinASecondOfKillAndLiveAfterRestartOnTheSameSequence() async throws {
        try await client.create("settings.volume", "i", default: .int32(1))
        let volume = library.property("settings.volume", as: Int32.self)
        let values = StreamRecorder(volume.values)
        let states = StreamRecorder(volume.states)
        await values.wait { $0 == [1] }
        try await client.set("settings.volume", .int32(2))
        await values.wait { $0.last == 2 }
        await states.wait { $0.last == .live }

        daemon.process.signal(SIGKILL)
        // The bound the library promises: the bus announces the lost owner at once.
        let stale = await states.wait(timeout: 1) { $0.last == .stale }
        XCTAssertEqual(stale.last, .stale, "not stale within a second of kill -9")
        XCTAssertEqual(volume.current, 2, "the last known value is kept while stale")
        _ = await daemon.process.waitForExit(timeout: 5)

        daemon = try await Daemon.start(on: bus, arguments: daemonArguments, watcher: client)
        let live = await states.wait { $0.last == .live }
        XCTAssertEqual(live.last, .live)
        try await client.set("settings.volume", .int32(3))
        let seen = await values.wait { $0.last == 3 }
        XCTAssertEqual(seen, [1, 2, 3], "the same sequence goes on after the restart, without a duplicate")
        XCTAssertEqual(volume.current, 3)
    }
}

/// The doc comment's example of a struct of one's own, sent as `(ii)`.
struct Point: DBusValueConvertible, Equatable {
    var x: Int32, y: Int32
    static let dbusType = DBusType.structure([.int32, .int32])
    init(x: Int32, y: Int32) { self.x = x; self.y = y }
    init?(dbusValue: DBusValue) {
        guard let fields = dbusValue.structureFields(count: 2),
              let x = Int32(dbusValue: fields[0]), let y = Int32(dbusValue: fields[1]) else { return nil }
        self.init(x: x, y: y)
    }
    var dbusValue: DBusValue { .structure([x.dbusValue, y.dbusValue]) }
}
