import XCTest

@testable import DBus

/// `Properties.Get` of a computed table is answered by the tree straight from the message; every
/// case it leaves to the general path must still get the general path's answer.
final class PropertiesGetFastPathTests: XCTestCase {
    private final class State: @unchecked Sendable { // confined to the connection's queue
        var ownGets = 0
    }

    private static let interface = "org.propbus.Test"
    private static let properties = "org.freedesktop.DBus.Properties"

    private static func table() -> PropertyTable {
        let values: [String: DBusValue] = ["open": .int32(7), "secret": .string("s3cr3t")]
        func describe(_ name: String) -> PropertyDescription? {
            guard let value = values[name] else { return nil }
            var description = PropertyDescription(name, type: value.type, get: { value })
            if name == "secret" {
                description.authorizeRead = { call throws(DBusError) in
                    throw DBusError(name: DBusError.Name.accessDenied, message: "\(call.sender) may not read \(name)")
                }
            }
            return description
        }
        return .computed(ComputedProperties(names: { values.keys.sorted() }, lookup: describe,
                                            value: { $0 == "secret" ? nil : values[$0] },
                                            forEach: { visit in for name in values.keys.sorted() { visit(name, values[name]!, name == "secret") } }))
    }

    func testGetOfAComputedTableAndEveryCaseLeftToTheGeneralPath() async throws {
        let bus = try TestBus.start()
        defer { bus.stop() }
        let service = try await bus.connect(), client = try await bus.connect()
        defer { service.close(); client.close() }
        let state = State()
        let tree = await onQueue(service) { () -> ObjectTree in
            let table = Self.table()
            let tree = ObjectTree(connection: service)
            tree.export(ExportedObject { [InterfaceDescription(Self.interface, properties: table)] }, at: "/obj")
            // An object describing Properties itself: its own Get answers, not the tree's.
            tree.export(ExportedObject {
                [InterfaceDescription(Self.interface, properties: table),
                 InterfaceDescription(Self.properties, methods: [
                    MethodDescription("Get", in: [("interface_name", .string), ("property_name", .string)], out: [("value", .variant)]) { _ in
                        state.ownGets += 1
                        return .reply([.variant(.string("own"))])
                    },
                 ])]
            }, at: "/own")
            return tree
        }
        func get(_ path: String, _ arguments: [DBusValue]) async throws(DBusError) -> [DBusValue] {
            try await client.call(destination: service.uniqueName, path: path, interface: Self.properties,
                                  member: "Get", arguments: arguments)
        }
        func refusal(_ path: String, _ arguments: [DBusValue]) async -> DBusError? {
            do throws(DBusError) {
                _ = try await get(path, arguments)
                return nil
            } catch { return error }
        }
        let value = try await get("/obj", [.string(Self.interface), .string("open")])
        XCTAssertEqual(value, [.variant(.int32(7))])
        // An empty interface name: whichever interface has it.
        let anyInterface = try await get("/obj", [.string(""), .string("open")])
        XCTAssertEqual(anyInterface, [.variant(.int32(7))])

        let restricted = await refusal("/obj", [.string(Self.interface), .string("secret")])
        XCTAssertEqual(restricted?.name, DBusError.Name.accessDenied)
        XCTAssertFalse(restricted?.message.contains("s3cr3t") ?? true)
        let unknownProperty = await refusal("/obj", [.string(Self.interface), .string("nothing")])
        XCTAssertEqual(unknownProperty?.name, DBusError.Name.unknownProperty)
        XCTAssertTrue(unknownProperty?.message.contains("nothing") ?? false, unknownProperty?.message ?? "")
        let unknownInterface = await refusal("/obj", [.string("org.propbus.Nothing"), .string("open")])
        XCTAssertEqual(unknownInterface?.name, DBusError.Name.unknownInterface)
        let wrongArguments = await refusal("/obj", [.string(Self.interface)])
        XCTAssertEqual(wrongArguments?.name, DBusError.Name.invalidArgs)
        let unknownObject = await refusal("/nowhere", [.string(Self.interface), .string("open")])
        XCTAssertEqual(unknownObject?.name, DBusError.Name.unknownObject)

        let own = try await get("/own", [.string(Self.interface), .string("open")])
        XCTAssertEqual(own, [.variant(.string("own"))])
        let ownGets = await onQueue(service) { state.ownGets }
        XCTAssertEqual(ownGets, 1)
        withExtendedLifetime(tree) {}
    }
}
