import DBusValues
import XCTest
@testable import PropBus

final class ValueLayersTests: XCTestCase {
    private func file(_ value: Int32, _ source: String) -> LayerValue { LayerValue(value: .int32(value), source: source) }

    func testTheFirstLayerHoldingAValueWinsTopDown() {
        var layers = ValueLayers(site: file(30, "/etc/propbus/defaults.d/a.json"), vendor: file(10, "/usr/share/propbus/defaults.d/v.json"))
        XCTAssertEqual(layers.effective(stored: nil, defaultValue: .int32(50)).layer, .site)
        XCTAssertEqual(layers.effective(stored: .int32(55), defaultValue: .int32(50)).value, .int32(55))
        layers.overrides = [OverrideHold(handle: 1, value: .int32(0), holder: ":1.5", since: 1),
                            OverrideHold(handle: 2, value: .int32(7), holder: ":1.6", since: 2)]
        XCTAssertEqual(layers.effective(stored: .int32(55), defaultValue: .int32(50)).value, .int32(7))
        layers.overrides.removeLast()
        XCTAssertEqual(layers.effective(stored: .int32(55), defaultValue: .int32(50)).value, .int32(0))
        layers.mandatory = MandatoryValue(value: file(20, "/etc/propbus/mandatory.d/m.json"))
        XCTAssertEqual(layers.effective(stored: .int32(55), defaultValue: .int32(50)).layer, .mandatory)
        XCTAssertEqual(layers.fallback(defaultValue: .int32(50)), .int32(30))
    }

    func testAnEntryWithoutLayersReadsItsStoredValueOrDefaultAndDropsEmptyLayers() throws {
        let definition = PropertyDefinition(key: try Key("a.b"), type: .int32, defaultValue: .int32(50))
        var entry = PropertyModel.Entry(definition: definition, storedValue: nil, revision: 1)
        XCTAssertEqual(entry.value, .int32(50))
        XCTAssertEqual(entry.valueLayer, .default)
        entry.layers = ValueLayers(site: file(30, "s.json"))
        XCTAssertEqual(entry.value, .int32(30))
        XCTAssertEqual(entry.valueLayer, .site)
        entry.layers = ValueLayers()
        XCTAssertNil(entry.layers)
        entry.storedValue = .int32(1)
        XCTAssertEqual(entry.valueLayer, .user)
    }
}
