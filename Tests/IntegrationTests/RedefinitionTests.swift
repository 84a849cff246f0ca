import DBus
import Foundation
import XCTest

/// A redefinition never deletes data. A stored value the new definition does
/// not admit is kept, hidden, and comes back when a later definition admits it.
final class RedefinitionTests: DaemonTestCase, @unchecked Sendable {
    private func createVolume(maximum: Int32) async throws {
        try await client.create("demo.vol", "i", default: .int32(5), options: ["maximum": .variant(.int32(maximum))])
    }

    func testNarrowThenWidenKeepsTheStoredValue() async throws {
        try await createVolume(maximum: 100)
        try await client.set("demo.vol", .int32(80))
        try await createVolume(maximum: 50)
        let narrowed = try await client.get("demo.vol")
        XCTAssertEqual(narrowed, .int32(5), "reads give the default while the value is hidden")
        let row = try await client.list(prefix: "demo.vol").first
        XCTAssertEqual(row?.metadata["is_set"], .boolean(false))
        XCTAssertEqual(row?.metadata["hidden_value"], .int32(80), "metadata: \(row?.metadata ?? [:])")
        let reason = row?.metadata["hidden_reason"]?.stringValue ?? ""
        XCTAssertTrue(reason.contains("50"), "the reason names the range: \(reason)")

        try await createVolume(maximum: 100)
        let widened = try await client.get("demo.vol")
        XCTAssertEqual(widened, .int32(80), "the stored value comes back")
        let after = try await client.list(prefix: "demo.vol").first
        XCTAssertNil(after?.metadata["hidden_value"])
    }

    func testNarrowThenWidenKeepsTheStoredValueAcrossRestarts() async throws {
        try await createVolume(maximum: 100)
        try await client.set("demo.vol", .int32(80))
        try await createVolume(maximum: 50)
        try await restartDaemon(arguments: [])
        let narrowed = try await client.get("demo.vol")
        XCTAssertEqual(narrowed, .int32(5))
        try await createVolume(maximum: 100)
        try await restartDaemon(arguments: [])
        let widened = try await client.get("demo.vol")
        XCTAssertEqual(widened, .int32(80))
    }

    func testChoicesNarrowedByAModelFileHideAndRestoreTheValue() async throws {
        let model = bus.directory.appendingPathComponent("ui.json")
        func write(_ choices: String) throws {
            try #"{"groups": {"ui": {"properties": {"theme": {"type": "s", "default": "light", "choices": [\#(choices)]}}}}}"#
                .write(to: model, atomically: true, encoding: .utf8)
        }
        try write(#""light", "dark""#)
        try await restartDaemon(arguments: ["--model", model.path])
        try await client.set("ui.theme", .string("dark"))
        try write(#""light""#)
        try await restartDaemon(arguments: ["--model", model.path])
        let hidden = try await client.get("ui.theme")
        XCTAssertEqual(hidden, .string("light"))
        try write(#""light", "dark""#)
        try await restartDaemon(arguments: ["--model", model.path])
        let back = try await client.get("ui.theme")
        XCTAssertEqual(back, .string("dark"), "the model-file edit did not delete the stored value")
    }

    func testDeletePropertyIsTheOneWayToDropAValue() async throws {
        try await createVolume(maximum: 100)
        try await client.set("demo.vol", .int32(80))
        try await createVolume(maximum: 50)
        try await client.delete("demo.vol")
        try await createVolume(maximum: 100)
        let value = try await client.get("demo.vol")
        XCTAssertEqual(value, .int32(5))
    }
}
