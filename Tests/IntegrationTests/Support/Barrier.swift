import DBus
import Foundation
import PropBus

/// "Nothing more came" without a sleep: a marker write whose signal must arrive.
///
/// propbusd sends its signals in order and this client's recorders all run, in arrival order,
/// on the client connection's queue. So once the marker's PropertiesChanged has been recorded,
/// every signal the daemon sent before the write (everything the operations under test
/// emitted, since their calls have returned) has reached its recorder too. A sleep instead
/// passes falsely under load, when a late signal comes after the check.
extension Client {
    static let barrierKey = "test.barrier.tick"

    /// Returns once every signal propbusd sent before this call has been recorded.
    func barrier(file: StaticString = #filePath, line: UInt = #line) async throws {
        let (path, name) = PropBusAPI.locate(Self.barrierKey)
        let current: Int32
        if case .int32(let value)? = try? await get(Self.barrierKey) {
            current = value
        } else {
            try await create(Self.barrierKey, "i", default: .int32(0))
            current = 0
        }
        let recorder = try await record(path: path, interface: PropBusAPI.properties, member: "PropertiesChanged")
        let next = current &+ 1
        try await set(Self.barrierKey, .int32(next))
        let arrived = await recorder.wait { $0.contains { $0.changed[name] == .int32(next) } }
        guard arrived.contains(where: { $0.changed[name] == .int32(next) }) else {
            throw BarrierError(message: "the barrier's own signal never came (\(Self.barrierKey) = \(next))")
        }
    }
}

struct BarrierError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}
