import DBus
import Foundation
import PropBus
import XCTest

/// Bindings from a command's state key to a key that becomes a fleet key: made on
/// host B, and checked to have ended, by the tests of each way the key becomes the fleet's.
extension FleetTestCase {
    /// On B: a command `command` (running `true`) and a persistent binding from its `Executing`
    /// to `key`, which must already exist.
    func bindExecuting(of command: String, to key: String) async throws {
        try await hostB.client.createCommand(command, ["exec": .array(of: .string, [.string("true")])])
        let bound = try await hostB.propctl(["bind", key, "--to", "\(command).Executing", "--direction", "from", "--persist"])
        XCTAssertTrue(bound.succeeded, "\(bound)")
    }

    /// Runs `command` on B and checks that its `Executing` no longer drives fleet key `key`
    /// (barrier: a marker write from A), that nothing reached etcd and that `propctl bindings`
    /// no longer lists the binding.
    func assertExecutingNoLongerDrives(_ key: String, command: String) async throws {
        let parsed = try Key(key)
        let changes = try await hostB.client.recordChanges(ofGroup: parsed.group)
        _ = try await hostB.client.execute(command)
        try await Fleet.barrier(from: hostA, to: hostB)
        XCTAssertEqual(changes.signals.compactMap { $0.changed[parsed.name] }, [], "the command's Executing drove the fleet key on B alone\n\(diagnostics)")
        XCTAssertNil(try Fleet.etcdEntry(etcd, prefix: prefix, key: key), "nothing was to reach etcd")
        let bindings = try await hostB.propctl(["bindings"])
        XCTAssertFalse(bindings.stdout.contains(key), "the binding is still listed:\n\(bindings.stdout)")
    }
}
