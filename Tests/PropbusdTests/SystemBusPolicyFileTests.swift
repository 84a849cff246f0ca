import Foundation
import PropBus
import XCTest

/// The system bus policy `systemd/org.propbus.PropBus1.conf` (docs/security.md): anyone may call the
/// daemon's interfaces, whose writes the daemon checks itself, and the file never denies
/// anything beyond the daemon's own name. Here the policy file as text, against the
/// names of the core's API: read, not loaded into a bus (IntegrationTests.SystemBusPolicyTests
/// loads it into one, with the daemon behind it).
final class SystemBusPolicyFileTests: XCTestCase {
    /// The policy as installed to /usr/share/dbus-1/system.d.
    private static let policyFile = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("systemd/org.propbus.PropBus1.conf")

    private var policyText: String { get throws { try String(contentsOf: Self.policyFile, encoding: .utf8) } }

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
        let standard = ["org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.ObjectManager", "org.freedesktop.DBus.Peer"]
        let needed = Set(standard + [PropBusAPI.propertiesInterface, PropBusAPI.managerInterface, PropBusAPI.valuesInterface,
                                     PropBusAPI.commandInterface, PropBusAPI.bindingInterface])
        XCTAssertEqual(needed.subtracting(allowed), [], "interfaces the policy keeps from the daemon")
        XCTAssertTrue(try policyText.contains("<policy context=\"default\">"))
    }

    func testOnlyThePropbusUserOwnsTheName() throws {
        let text = try policyText
        let owners = try elements("allow").filter { $0["own"] != nil }
        XCTAssertEqual(owners.map { $0["own"] }, [PropBusAPI.busName])
        XCTAssertTrue(text.contains("<policy user=\"propbus\">"), text)
    }

    /// The daemon bounds what the bus holds of its messages by asking the bus
    /// (`Debug.Stats.GetConnectionStats` of its own name), which the stock system.conf allows
    /// root only: its user, and only that method, are allowed it here.
    func testThePropbusUserMayAskTheBusWhatItHoldsOfItsMessages() throws {
        let text = try policyText
        let stats = try elements("allow").filter { $0["send_interface"] == "org.freedesktop.DBus.Debug.Stats" }
        XCTAssertEqual(stats.count, 1, text)
        XCTAssertEqual(stats.first?["send_destination"], "org.freedesktop.DBus")
        XCTAssertEqual(stats.first?["send_member"], "GetConnectionStats")
        let userPolicy = try XCTUnwrap(text.range(of: "<policy user=\"propbus\">"))
        let statsRule = try XCTUnwrap(text.range(of: "org.freedesktop.DBus.Debug.Stats\" send_member"))
        let end = try XCTUnwrap(text[userPolicy.upperBound...].range(of: "</policy>"))
        XCTAssertTrue(statsRule.lowerBound > userPolicy.upperBound && statsRule.upperBound < end.lowerBound, "the rule is the propbus user's: \(text)")
    }
}
