import PropBus
import XCTest

/// The API names are written once (``PropBusAPI``); this pins them to docs/dbus-api.md's spelling, so a
/// change there is a visible contract change and not a silent rename of both sides at once.
final class PropBusAPITests: XCTestCase {
    func testNamesAreTheSpecs() {
        XCTAssertEqual(PropBusAPI.busName, "org.propbus.PropBus1")
        XCTAssertEqual(PropBusAPI.rootPath, "/org/propbus/PropBus1")
        XCTAssertEqual(PropBusAPI.managerInterface, "org.propbus.PropBus1.Manager")
        XCTAssertEqual(PropBusAPI.valuesInterface, "org.propbus.PropBus1.Values")
        XCTAssertEqual(PropBusAPI.bindingInterface, "org.propbus.PropBus1.Binding")
        XCTAssertEqual(PropBusAPI.commandInterface, "org.propbus.PropBus1.Command")
        XCTAssertEqual(PropBusAPI.handlerPath, "/org/propbus/PropBus1/Handler")
        XCTAssertEqual(PropBusAPI.handlerInterface, "org.propbus.PropBus1.Handler")
        XCTAssertEqual(Key.rootPath, PropBusAPI.rootPath)
    }

    func testErrorNamesArePrefixedOnce() {
        XCTAssertEqual(PropBusError.Code.unknownKey.dbusName, "org.propbus.PropBus1.Error.UnknownKey")
        XCTAssertEqual(PropBusError.Code.invalidArgs.dbusName, "org.freedesktop.DBus.Error.InvalidArgs")
        for code in PropBusError.Code.allCases where !code.rawValue.contains(".") {
            XCTAssertEqual(code.dbusName, PropBusAPI.errorPrefix + code.rawValue)
        }
    }
}
