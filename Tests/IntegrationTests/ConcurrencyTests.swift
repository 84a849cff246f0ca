import DBus
import XCTest

/// Many clients writing at once lose nothing, and each sees its own writes in its own order.
final class ConcurrencyTests: DaemonTestCase {
    static let clients = 8
    static let setsPerClient = 200

    /// What one writer saw: the values its own PropertiesChanged carried, and the final Get.
    struct WriterResult: Sendable {
        var index: Int
        var signalled: [Int32]
        var finalValue: DBusValue?
        var failure: String?
    }

    func testEightClientsSettingConcurrentlyLoseNothingAndSeeTheirOwnOrder() async throws {
        for index in 0..<Self.clients {
            try await client.create("load.writer\(index).value", "i", default: .int32(0))
        }
        let bus = self.bus!
        let results = await withTaskGroup(of: WriterResult.self) { group in
            for index in 0..<Self.clients {
                group.addTask { await Self.write(index: index, on: bus) }
            }
            var results: [WriterResult] = []
            for await result in group { results.append(result) }
            return results.sorted { $0.index < $1.index }
        }
        XCTAssertEqual(results.count, Self.clients)
        for result in results {
            XCTAssertNil(result.failure, "writer \(result.index): \(result.failure ?? "")")
            XCTAssertEqual(result.finalValue, .int32(Int32(Self.setsPerClient)), "writer \(result.index) final value")
            XCTAssertEqual(result.signalled.last, Int32(Self.setsPerClient), "writer \(result.index): last PropertiesChanged")
            let increasing = zip(result.signalled, result.signalled.dropFirst()).allSatisfy { $0 < $1 }
            XCTAssertTrue(increasing, "writer \(result.index) saw its changes out of order: \(result.signalled)")
            // Each Set waited for its reply, so each is its own change; coalescing may only merge
            // changes that fell into one dispatch round, never reorder or invent them.
            XCTAssertLessThanOrEqual(result.signalled.count, Self.setsPerClient)
        }
        // Seen from an outsider, too.
        for index in 0..<Self.clients {
            let value = try await client.get("load.writer\(index).value")
            XCTAssertEqual(value, .int32(Int32(Self.setsPerClient)), "writer \(index) as seen by another client")
        }
        XCTAssertTrue(daemon.process.isRunning)
    }

    /// One writer: its own connection, subscribed to its own group, then 200 sets of 1…200, each
    /// waiting for its reply.
    private static func write(index: Int, on bus: PrivateBus) async -> WriterResult {
        var result = WriterResult(index: index, signalled: [])
        let key = "load.writer\(index).value"
        do {
            let writer = try await Client.connect(to: bus)
            defer { writer.close() }
            let changes = try await writer.recordChanges(ofGroup: "load.writer\(index)")
            for value in 1...Int32(setsPerClient) {
                try await writer.set(key, .int32(value))
            }
            let signals = await changes.wait { $0.last?.changed["value"] == .int32(Int32(setsPerClient)) }
            result.signalled = signals.compactMap {
                if case .int32(let value)? = $0.changed["value"] { value } else { nil }
            }
            result.finalValue = try await writer.get(key)
        } catch {
            result.failure = "\(error)"
        }
        return result
    }

    func testConcurrentCompareAndSetIncrementsNeverLoseAnUpdate() async throws {
        try await client.create("load.counter", "t", default: .uint64(0))
        let bus = self.bus!
        let perClient = 25
        let failures = await withTaskGroup(of: String?.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    do {
                        let writer = try await Client.connect(to: bus)
                        defer { writer.close() }
                        var done = 0
                        while done < perClient {
                            let current = try await writer.getWithRevision("load.counter")
                            guard case .uint64(let count) = current.value else { return "not a t: \(current.value)" }
                            do {
                                try await writer.compareAndSet("load.counter", revision: current.revision, .uint64(count + 1))
                                done += 1
                            } catch let error as DBusError where error.name == PropBusAPI.error("Conflict") {
                                continue
                            }
                        }
                        return nil
                    } catch {
                        return "\(error)"
                    }
                }
            }
            var failures: [String] = []
            for await failure in group { if let failure { failures.append(failure) } }
            return failures
        }
        XCTAssertEqual(failures, [])
        let value = try await client.get("load.counter")
        XCTAssertEqual(value, .uint64(UInt64(4 * perClient)))
    }
}
