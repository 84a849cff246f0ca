import DBus
import Foundation
import XCTest

/// The system bus policy `systemd/org.propbus.PropBus1.conf` (docs/security.md): anyone may call the
/// daemon's interfaces, whose writes the daemon checks itself, and the file never denies
/// anything beyond the daemon's own name. Here the policy file as text: read, not loaded into a
/// bus, so no daemon is started for it.
final class SystemBusPolicyFileTests: XCTestCase {
    private var policyText: String { get throws { try String(contentsOf: PrivateBus.policyFile, encoding: .utf8) } }

    /// The attributes of every element named `element` (`allow`, `deny`) in the policy file.
    private func elements(_ element: String) throws -> [[String: String]] {
        let text = try policyText
        var found: [[String: String]] = []
        var rest = text[...]
        while let start = rest.range(of: "<\(element) ") ?? rest.range(of: "<\(element)/") {
            guard let end = rest[start.upperBound...].range(of: ">") else { break }
            let body = rest[start.upperBound..<end.lowerBound]
            var attributes: [String: String] = [:]
            for pair in body.split(whereSeparator: { $0 == " " || $0 == "\n" }) {
                let parts = pair.split(separator: "=", maxSplits: 1)
                guard parts.count == 2 else { continue }
                attributes[String(parts[0])] = parts[1].trimmingCharacters(in: CharacterSet(charactersIn: "\"/"))
            }
            found.append(attributes)
            rest = rest[end.upperBound...]
        }
        return found
    }

    func testEveryDenyIsScopedToTheDaemonsName() throws {
        // A deny without send_destination would apply to every service on the bus.
        for deny in try elements("deny") {
            XCTAssertEqual(deny["send_destination"], PropBusAPI.busName, "unscoped deny: \(deny)")
        }
    }

    func testAnyoneMaySendToEveryInterfaceOfTheDaemon() throws {
        let allowed = Set(try elements("allow").filter { $0["send_destination"] == PropBusAPI.busName }.compactMap { $0["send_interface"] })
        let needed: Set = [PropBusAPI.properties, PropBusAPI.introspectable, PropBusAPI.objectManager, PropBusAPI.peer,
                           PropBusAPI.manager, PropBusAPI.values, "org.propbus.PropBus1.Command", "org.propbus.PropBus1.Binding"]
        XCTAssertEqual(needed.subtracting(allowed), [], "interfaces the policy keeps from the daemon")
        XCTAssertTrue(try policyText.contains("<policy context=\"default\">"))
    }

    func testOnlyThePropbusUserOwnsTheName() throws {
        let text = try policyText
        let owners = try elements("allow").filter { $0["own"] != nil }
        XCTAssertEqual(owners.map { $0["own"] }, [PropBusAPI.busName])
        XCTAssertTrue(text.contains("<policy user=\"propbus\">"), text)
    }
}

/// The same policy loaded into a system-like bus, with the daemon behind it.
final class SystemBusPolicyTests: AccessControlTestCase, @unchecked Sendable {
    func testTheBusEnforcesThePolicyAndLetsNobodysCallsReachTheDaemon() async throws {
        // Not in the policy: the bus itself refuses, so the policy really is in force here.
        let foreign = try await dbusSendAsNobody([PropBusAPI.rootPath, "org.example.NotPropbus.Hello"])
        XCTAssertFalse(foreign.succeeded)
        XCTAssertTrue(foreign.stderr.contains("Rejected send message"), "\(foreign)")
        // Listed interfaces reach the daemon, which answers even methods it lacks itself.
        let unknown = try await dbusSendAsNobody([PropBusAPI.rootPath, "\(PropBusAPI.manager).NoSuchMethod"])
        XCTAssertTrue(unknown.stderr.contains(PropBusAPI.standard("UnknownMethod")), "\(unknown)")
        let ping = try await dbusSendAsNobody([PropBusAPI.rootPath, "\(PropBusAPI.peer).Ping"])
        assertSucceeded(ping)
        // Subscribing is the bus's business, open to all.
        let monitor = try await asNobody("busctl", ["--address=\(bus.address)", "--", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                                   "org.freedesktop.DBus", "AddMatch", "s", "type='signal',sender='\(PropBusAPI.busName)'"])
        assertSucceeded(monitor)
    }
}
