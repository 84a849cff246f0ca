import DBusValues
import XCTest

@testable import PropBus

/// The model's compact storage: the entry table, out-of-line metadata and the
/// one-pass key check must behave exactly like the plain structures they replace.
final class CompactStorageTests: XCTestCase {
    private func entry(_ key: String, _ value: Int32) throws -> PropertyModel.Entry {
        PropertyModel.Entry(definition: PropertyDefinition(key: try Key(key), type: .int32, defaultValue: .int32(0)),
                            storedValue: .int32(value), revision: UInt64(value))
    }

    func testEntryTableAgreesWithADictionaryThroughInsertsReplacementsAndRemovals() throws {
        var table = EntryTable()
        var reference: [Key: Int32] = [:]
        var generator = SystemRandomNumberGenerator()
        for step in 0..<4000 {
            let key = try Key("g\(Int.random(in: 0..<7, using: &generator)).p\(Int.random(in: 0..<300, using: &generator))")
            if Bool.random(using: &generator) || step < 500 {
                let old = table.updateValue(try entry(key.text, Int32(step)))
                XCTAssertEqual(old?.storedValue, reference[key].map(DBusValue.int32), "replacing \(key) returns the old entry")
                reference[key] = Int32(step)
            } else {
                let removed = table.removeValue(forKey: key)
                XCTAssertEqual(removed?.storedValue, reference[key].map(DBusValue.int32), "removing \(key) returns its entry")
                reference[key] = nil
            }
        }
        XCTAssertEqual(table.count, reference.count)
        for (key, value) in reference {
            // Removal moves the last entry into the gap: every key must still find its own entry.
            XCTAssertEqual(table[key]?.definition.key, key)
            XCTAssertEqual(table[key]?.storedValue, .int32(value))
        }
        XCTAssertEqual(Set(table.values.map(\.definition.key)), Set(reference.keys))
        XCTAssertNil(table[try Key("absent.key")])
    }

    func testOutOfLineMetadataComparesAndCopiesLikeStoredFields() throws {
        let plain = PropertyDefinition(key: try Key("a.b"), type: .int32, defaultValue: .int32(0))
        var described = plain
        described.description = "something"
        XCTAssertNotEqual(described, plain)
        XCTAssertEqual(plain.description, "", "a copy's change leaves the original alone")
        described.description = ""
        XCTAssertEqual(described, plain, "metadata back at its default is equal to never set")
        XCTAssertEqual(described.hashValue, plain.hashValue)

        var ranged = plain
        ranged.minimum = .int32(1)
        ranged.maximum = .int32(9)
        ranged.choices = [.int32(1), .int32(5)]
        ranged.writers = ["root"]
        ranged.stateOf = try Key("cmd.run")
        ranged.source = "/etc/propbus/models/a.json"
        var copy = ranged
        copy.maximum = .int32(8)
        XCTAssertEqual(ranged.maximum, .int32(9))
        XCTAssertEqual(copy.minimum, .int32(1), "the other fields stay with the copy")
        XCTAssertEqual(copy.source, "/etc/propbus/models/a.json")
        XCTAssertEqual(ranged.metadata["choices"], .array(of: .variant, [.variant(.int32(1)), .variant(.int32(5))]))
        XCTAssertEqual(ranged.metadata["state_of"], .string("cmd.run"))
        XCTAssertNotEqual(copy, ranged)
        copy.maximum = .int32(9)
        XCTAssertEqual(copy, ranged)
    }

    func testHiddenValueSurvivesCopiesOfAnEntry() throws {
        var entry = try entry("a.b", 1)
        XCTAssertNil(entry.hidden)
        entry.hidden = PropertyModel.HiddenValue(value: .int32(99), reason: "out of range")
        let copy = entry
        entry.hidden = nil
        XCTAssertEqual(copy.hidden?.value, .int32(99))
        XCTAssertEqual(copy.hidden?.reason, "out of range")
        XCTAssertNil(entry.hidden)
    }

    func testOnePassKeyCheckSplitsAndRefusesLikeTheFullCheck() throws {
        for (text, group, name) in [("a.b", "a", "b"), ("ui.switch.on", "ui.switch", "on"), ("1a.b", "1a", "b"), ("a.1.b_2", "a.1", "b_2"),
                                    ("_._", "_", "_"), (String(repeating: "g", count: 253) + ".n", String(repeating: "g", count: 253), "n")] {
            let key = try Key(text)
            XCTAssertEqual(key.group, group, text)
            XCTAssertEqual(key.name, name, text)
            XCTAssertEqual(key, Key(uncheckedGroup: group, name: name))
        }
        for text in ["", "a", ".a", "a.", "a..b", "a.1b", "a.b-c", "a.bé", "a .b", String(repeating: "g", count: 254) + ".n"] {
            XCTAssertThrowsError(try Key(text), "'\(text)' is not a key") { error in
                XCTAssertEqual((error as? PropBusError)?.code, .invalidKey)
            }
        }
    }
}
