import DBusValues
import XCTest

@testable import PropBus

/// Values that could not be used again once stored are refused by the model: unix fds anywhere,
/// and nesting deeper than the replies that carry a value can hold.
final class HostileValueCheckTests: XCTestCase {
    private func model() throws -> PropertyModel { try PropertyModel(store: MemoryStore()) }

    /// `n` variants around a string: the shape of the "63 nested variants" report.
    private func nested(_ n: Int) -> DBusValue {
        var value = DBusValue.string("x")
        for _ in 0..<n { value = .variant(value) }
        return value
    }

    private func assertError(_ code: PropBusError.Code, containing fragments: [String],
                             file: StaticString = #filePath, line: UInt = #line, _ body: () throws -> Void) {
        do {
            try body()
            XCTFail("expected \(code), but it was accepted", file: file, line: line)
        } catch let error as PropBusError {
            XCTAssertEqual(error.code, code, error.message, file: file, line: line)
            for fragment in fragments {
                XCTAssertTrue(error.message.contains(fragment), "'\(error.message)' does not contain '\(fragment)'", file: file, line: line)
            }
        } catch {
            XCTFail("unexpected \(error)", file: file, line: line)
        }
    }

    func testTypesHoldingUnixFDsAreRefusedAtCreate() throws {
        let model = try model()
        for type in ["h", "ah", "a{sh}", "(sh)", "a(ia{ih})"] {
            assertError(.invalidArgs, containing: ["fd.k", "'h'", "unix fd"]) {
                _ = try model.create(key: "fd.k", type: type, defaultValue: try DBusType(parsing: type).zeroValue)
            }
        }
        XCTAssertNil(model.entry(for: try Key("fd.k")))
    }

    func testValuesHoldingUnixFDsAreRefusedEverywhere() throws {
        let model = try model()
        _ = try model.create(key: "fd.any", type: "v", defaultValue: .variant(.string("")))
        _ = try model.create(key: "fd.list", type: "av", defaultValue: .array(of: .variant, []))
        let fd = DBusValue.variant(.unixFD(0))
        assertError(.invalidArgs, containing: ["fd.any", "unix fd"]) { _ = try model.set("fd.any", to: fd) }
        assertError(.invalidArgs, containing: ["fd.list", "unix fd"]) {
            _ = try model.set("fd.list", to: .array(of: .variant, [.variant(.structure([.string("a"), .unixFD(3)]))]))
        }
        assertError(.invalidArgs, containing: ["fd.any", "unix fd"]) { _ = try model.apply(set: [("fd.any", fd)], reset: []) }
        assertError(.invalidArgs, containing: ["fd.any", "unix fd"]) {
            _ = try model.compareAndSet("fd.any", expectedRevision: try model.entry("fd.any").revision, to: fd)
        }
        assertError(.invalidArgs, containing: ["fd.new", "unix fd"]) { _ = try model.create(key: "fd.new", type: "v", defaultValue: fd) }
        assertError(.invalidArgs, containing: ["fd.new", "unix fd"]) {
            _ = try model.create(key: "fd.new", type: "v", defaultValue: .variant(.string("")), options: ["value": fd])
        }
        XCTAssertEqual(try model.value(of: "fd.any"), .variant(.string("")))
    }

    func testStoredUnixFDPropertiesAreLeftOutAtLoadWithTheReason() throws {
        var state = StoredState()
        state.definitions = [
            PropertyDefinition(key: try Key("old.fd"), type: .unixFD, defaultValue: .unixFD(0)),
            PropertyDefinition(key: try Key("old.any"), type: .variant, defaultValue: .variant(.string(""))),
            PropertyDefinition(key: try Key("old.name"), type: .string, defaultValue: .string("")),
        ]
        state.values = [
            try Key("old.fd"): (.unixFD(7), 3),
            try Key("old.any"): (.variant(.unixFD(7)), 4),
            try Key("old.name"): (.string("kept"), 5),
        ]
        let model = try PropertyModel(store: PreparedStore(state))
        XCTAssertNil(model.entry(for: try Key("old.fd")))
        XCTAssertEqual(try model.value(of: "old.any"), .variant(.string("")))
        XCTAssertEqual(try model.value(of: "old.name"), .string("kept"))
        XCTAssertEqual(model.refusedAtLoad.count, 2, "\(model.refusedAtLoad)")
        XCTAssertTrue(model.refusedAtLoad.contains { $0.contains("old.fd") && $0.contains("unix fd") }, "\(model.refusedAtLoad)")
        XCTAssertTrue(model.refusedAtLoad.contains { $0.contains("old.any") && $0.contains("unix fd") }, "\(model.refusedAtLoad)")
    }

    /// GetManagedObjects (`a{oa{sa{sv}}}`) puts a value 7 levels deep, as deep as any reply does
    /// (ListProperties' `choices` too); with libdbus's 64 that leaves 57.
    func testNestingDepthIsCountedAsTheDeepestReplyNestsIt() throws {
        func managedObjects(_ value: DBusValue) -> DBusValue {
            let properties = DBusValue.dictionary(key: .string, value: .variant, [DictionaryEntry(.string("k"), .variant(value))])
            let interfaces = DBusValue.dictionary(key: .string, value: properties.type, [DictionaryEntry(.string("i"), properties)])
            return .dictionary(key: .objectPath, value: interfaces.type, [DictionaryEntry(.objectPath("/a"), interfaces)])
        }
        XCTAssertNoThrow(try managedObjects(nested(57)).validate())
        XCTAssertThrowsError(try managedObjects(nested(58)).validate())
        XCTAssertEqual(PropertyDefinition.maximumNestingDepth, 57)
        XCTAssertEqual(nested(57).nestingDepth, 57)
    }

    /// The depth count agrees with the wire validator for every kind of container, not just variants.
    func testNestingDepthCountsEachContainerAsTheValidatorDoes() throws {
        func managedObjects(_ value: DBusValue) -> DBusValue {
            let properties = DBusValue.dictionary(key: .string, value: .variant, [DictionaryEntry(.string("k"), .variant(value))])
            let interfaces = DBusValue.dictionary(key: .string, value: properties.type, [DictionaryEntry(.string("i"), properties)])
            return .dictionary(key: .objectPath, value: interfaces.type, [DictionaryEntry(.objectPath("/a"), interfaces)])
        }
        func padded(_ core: DBusValue, to depth: Int) -> DBusValue {
            var value = core
            while value.nestingDepth < depth { value = .variant(value) }
            return value
        }
        let cores: [DBusValue] = [
            .structure([.string("a"), .variant(.int32(1))]),
            .array(of: .structure([.int32]), [.structure([.int32(1)])]),
            .array(of: .structure([.int32]), []),
            .vardict(["k": .string("v")]),
            .array(of: .int32, [.int32(1)]),
            .bytes([1, 2]),
            .array(of: .array(.string), [.array(of: .string, [.string("s")])]),
        ]
        for core in cores {
            let fits = padded(core, to: PropertyDefinition.maximumNestingDepth)
            XCTAssertEqual(fits.nestingDepth, PropertyDefinition.maximumNestingDepth, "\(core.signature)")
            XCTAssertNoThrow(try managedObjects(fits).validate(), "\(core.signature)")
            XCTAssertThrowsError(try managedObjects(.variant(fits)).validate(), "\(core.signature)")
        }
    }

    func testValuesTooDeepToSendBackAreRefusedNamingKeyAndDepth() throws {
        let model = try model()
        _ = try model.create(key: "deep.any", type: "v", defaultValue: .variant(.string("")))
        XCTAssertNoThrow(try model.set("deep.any", to: nested(57)))
        for value in [nested(58), nested(63)] {
            assertError(.invalidValue, containing: ["deep.any", "\(value.nestingDepth)", "57"]) { _ = try model.set("deep.any", to: value) }
            assertError(.invalidValue, containing: ["deep.any"]) { _ = try model.apply(set: [("deep.any", value)], reset: []) }
            assertError(.invalidValue, containing: ["deep.any"]) {
                _ = try model.compareAndSet("deep.any", expectedRevision: try model.entry("deep.any").revision, to: value)
            }
            // CreateProperty's `v` argument wraps the default once more.
            assertError(.invalidValue, containing: ["deep.new"]) { _ = try model.create(key: "deep.new", type: "v", defaultValue: .variant(value)) }
        }
        XCTAssertEqual(try model.value(of: "deep.any"), nested(57))
    }

    // MARK: NUL in a definition's text

    func testANULInADefinitionsTextIsRefusedOnEveryPath() throws {
        let created = try model()
        for options: [String: DBusValue] in [["description": .string("x\0y")], ["writers": .array(of: .string, [.string("nobody\0zzz")])]] {
            XCTAssertThrowsError(try created.create(key: "p.k", type: "i", defaultValue: DBusValue.int32(0), options: options)) { error in
                XCTAssertEqual((error as? PropBusError)?.code, .invalidArgs)
                XCTAssertTrue("\(error)".contains("p.k") && "\(error)".contains("NUL"), "\(error)")
            }
        }
        let key = try Key("c.run")
        for options: [String: DBusValue] in [
            ["exec": .array(of: .string, [.string("/bin/echo"), .string("x\0y")])],
            ["exec": .array(of: .string, [.string("/bin/true")]), "description": .string("x\0y")],
            ["exec": .array(of: .string, [.string("/bin/true")]), "writers": .array(of: .string, [.string("nobody\0zzz")])],
            ["exec": .array(of: .string, [.string("/bin/true")]), "enabled_when": .string("'x\0y' == 'x'")],
        ] {
            XCTAssertThrowsError(try CommandDefinition(key: key, options: options)) { error in
                XCTAssertTrue("\(error)".contains("c.run") && "\(error)".contains("NUL"), "\(error)")
            }
        }
        // One an older version stored is left out at load, with the reason.
        var stored = PropertyDefinition(key: try Key("old.text"), type: .string, defaultValue: .string(""))
        stored.description = "x\0y"
        var state = StoredState()
        state.definitions = [stored, PropertyDefinition(key: try Key("old.name"), type: .string, defaultValue: .string(""))]
        let loaded = try PropertyModel(store: PreparedStore(state))
        XCTAssertNil(loaded.entry(for: try Key("old.text")))
        XCTAssertNotNil(loaded.entry(for: try Key("old.name")))
        XCTAssertTrue(loaded.refusedAtLoad.contains { $0.contains("old.text") && $0.contains("NUL") }, "\(loaded.refusedAtLoad)")
    }
}

/// A store that hands the model a prepared state, as an older version could have left it.
private final class PreparedStore: PropertyStore {
    let state: StoredState
    init(_ state: StoredState) { self.state = state }
    func load() -> StoredState { state }
    func commit(_ writeSet: WriteSet, durability: StoreChanges.Durability) {}
}
