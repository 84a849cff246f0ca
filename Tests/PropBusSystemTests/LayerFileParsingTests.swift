import DBusValues
import XCTest
@testable import PropBus
@testable import PropBusModelFiles

/// The layer-file adapter: a file's entries, its mistakes, and the directories read.
final class LayerFileParsingTests: XCTestCase {
    func testKeysPrefixesAndTheLongFormWithForInAMandatoryFile() throws {
        let text = #"{"settings.volume": {"value": 20, "for": ["@students", "alice"]}, "ui.*": 12, "ui.tags": {"value": ["a"]}, "ui.dict": {"value": 1, "other": 2}}"#
        let (entries, problems) = LayerFiles.parse(text, path: "/m/10.json", layer: .mandatory)
        XCTAssertEqual(problems, [])
        XCTAssertEqual(entries.map(\.target.text), ["ui.*", "settings.volume", "ui.tags", "ui.dict"], "prefixes first")
        XCTAssertEqual(entries[1].lockedFor, ["@students", "alice"])
        XCTAssertEqual(entries[1].value, 20)
        XCTAssertEqual(entries[2].value, ["a"])
        XCTAssertEqual(entries[3].value, ["value": 1, "other": 2], "an object with other members is a value")
        XCTAssertTrue(entries[0].target.matches(try Key("ui.a.b")))
        XCTAssertFalse(entries[0].target.matches(try Key("uix.a")))
    }

    func testMistakesNameTheFileAndTheEntryAndTheRestIsKept() {
        let bad = LayerFiles.parse(#"{"a.b": "#, path: "/d/20-bad.json", layer: .site)
        XCTAssertEqual(bad.entries, [])
        XCTAssertTrue(bad.problems.first?.description.hasPrefix("/d/20-bad.json: line 1") == true, "\(bad.problems)")
        let mixed = LayerFiles.parse(#"{"nodot": 1, "a.b": {"value": 1, "for": ["x"]}, "c.d": 2, "*": 3}"#, path: "/d/30.json", layer: .site)
        XCTAssertEqual(mixed.entries.map(\.target.text), ["c.d"])
        XCTAssertEqual(mixed.problems.map(\.key), ["nodot", "a.b", "*"])
        XCTAssertTrue(mixed.problems[1].problem.contains("mandatory.d only"), "\(mixed.problems)")
        let notObject = LayerFiles.parse("[1]", path: "/d/40.json", layer: .vendor)
        XCTAssertEqual(notObject.problems.count, 1)
    }

    func testTheDirectoriesAreReadTopDownInNameOrder() throws {
        let root = NSTemporaryDirectory() + "layers-\(getpid())-\(UInt32.random(in: 0 ... .max))"
        defer { try? FileManager.default.removeItem(atPath: root) }
        for (path, text) in [("etc/mandatory.d/10.json", #"{"a.b": 1}"#), ("etc/defaults.d/20.json", #"{"a.b": 3}"#),
                             ("etc/defaults.d/10.json", #"{"a.b": 2}"#), ("usr/defaults.d/10.json", #"{"a.b": 4}"#),
                             ("etc/defaults.d/notes.txt", "ignored")] {
            let full = root + "/" + path
            try FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try text.write(toFile: full, atomically: true, encoding: .utf8)
        }
        let set = LayerFiles.read(configDirectory: root + "/etc", vendorDirectory: root + "/usr")
        XCTAssertEqual(set.problems, [])
        XCTAssertEqual(set.entries.map(\.layer), [.mandatory, .site, .site, .vendor])
        XCTAssertEqual(set.entries.map(\.value), [1, 2, 3, 4])
        XCTAssertEqual(LayerFiles.read(configDirectory: root + "/none", vendorDirectory: root + "/none"), LayerFileSet())
    }

    func testTheManagedFileKeepsOtherEntriesAndDropsAnUnlockedOne() throws {
        let first = try LayerFiles.managedText(nil, setting: "a.b", to: 20, lockedFor: nil)
        let second = try LayerFiles.managedText(first, setting: "c.*", to: "x", lockedFor: ["@students"])
        let parsed = LayerFiles.parse(second, path: "/m/50-propctl.json", layer: .mandatory)
        XCTAssertEqual(parsed.entries.map(\.target.text), ["c.*", "a.b"])
        XCTAssertEqual(parsed.entries.first?.lockedFor, ["@students"])
        let third = try LayerFiles.managedText(second, setting: "a.b", to: nil, lockedFor: nil)
        XCTAssertEqual(LayerFiles.parse(third, path: "/m/50-propctl.json", layer: .mandatory).entries.map(\.target.text), ["c.*"])
        XCTAssertThrowsError(try LayerFiles.managedText("[", setting: "a.b", to: 1, lockedFor: nil))
    }
}
