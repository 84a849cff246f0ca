import DBus
import XCTest

/// Every property type (docs/dbus-api.md) works through `busctl`, `dbus-send` and `gdbus` exactly as a user would
/// type it, and reads back as the same D-Bus value through the project's own client.
final class ValueTypeTests: DaemonTestCase {
    /// One property type, with a value to set through each tool and what reads back.
    struct TypeCase {
        var signature: String
        var defaultValue: DBusValue
        /// `busctl set-property` arguments after the property name, and `busctl get-property`'s text for them.
        var busctl: [String]
        var busctlPrinted: String
        var busctlValue: DBusValue
        /// `dbus-send` `variant:TYPE:VALUE`; nil where dbus-send cannot express the type
        /// (it has no `signature` type and puts only basic types in a variant).
        var dbusSend: String?
        var dbusSendValue: DBusValue?
        /// GVariant text for `gdbus call … Set`.
        var gvariant: String
        var gvariantValue: DBusValue

        /// A property name derived from the signature: `a{sv}` → `k_a_sv_`.
        var name: String {
            "k_" + signature.map { $0.isLetter ? String($0) : "_" }.joined()
        }
    }

    static let group = "types.all"

    static let cases: [TypeCase] = [
        TypeCase(signature: "y", defaultValue: .byte(0), busctl: ["y", "200"], busctlPrinted: "y 200", busctlValue: .byte(200),
                 dbusSend: "byte:7", dbusSendValue: .byte(7), gvariant: "<byte 0x09>", gvariantValue: .byte(9)),
        TypeCase(signature: "b", defaultValue: .boolean(false), busctl: ["b", "true"], busctlPrinted: "b true", busctlValue: .boolean(true),
                 dbusSend: "boolean:false", dbusSendValue: .boolean(false), gvariant: "<true>", gvariantValue: .boolean(true)),
        TypeCase(signature: "n", defaultValue: .int16(0), busctl: ["n", "-1234"], busctlPrinted: "n -1234", busctlValue: .int16(-1234),
                 dbusSend: "int16:-7", dbusSendValue: .int16(-7), gvariant: "<int16 -9>", gvariantValue: .int16(-9)),
        TypeCase(signature: "q", defaultValue: .uint16(0), busctl: ["q", "65000"], busctlPrinted: "q 65000", busctlValue: .uint16(65000),
                 dbusSend: "uint16:7", dbusSendValue: .uint16(7), gvariant: "<uint16 9>", gvariantValue: .uint16(9)),
        TypeCase(signature: "i", defaultValue: .int32(0), busctl: ["i", "-100000"], busctlPrinted: "i -100000", busctlValue: .int32(-100000),
                 dbusSend: "int32:-7", dbusSendValue: .int32(-7), gvariant: "<-9>", gvariantValue: .int32(-9)),
        TypeCase(signature: "u", defaultValue: .uint32(0), busctl: ["u", "4000000000"], busctlPrinted: "u 4000000000", busctlValue: .uint32(4_000_000_000),
                 dbusSend: "uint32:7", dbusSendValue: .uint32(7), gvariant: "<uint32 9>", gvariantValue: .uint32(9)),
        TypeCase(signature: "x", defaultValue: .int64(0), busctl: ["x", "-9000000000"], busctlPrinted: "x -9000000000", busctlValue: .int64(-9_000_000_000),
                 dbusSend: "int64:-7", dbusSendValue: .int64(-7), gvariant: "<int64 -9>", gvariantValue: .int64(-9)),
        TypeCase(signature: "t", defaultValue: .uint64(0), busctl: ["t", "18000000000000000000"], busctlPrinted: "t 18000000000000000000",
                 busctlValue: .uint64(18_000_000_000_000_000_000),
                 dbusSend: "uint64:7", dbusSendValue: .uint64(7), gvariant: "<uint64 9>", gvariantValue: .uint64(9)),
        TypeCase(signature: "d", defaultValue: .double(0), busctl: ["d", "3.25"], busctlPrinted: "d 3.25", busctlValue: .double(3.25),
                 dbusSend: "double:-0.5", dbusSendValue: .double(-0.5), gvariant: "<2.5>", gvariantValue: .double(2.5)),
        TypeCase(signature: "s", defaultValue: .string(""), busctl: ["s", "hello world"], busctlPrinted: "s \"hello world\"", busctlValue: .string("hello world"),
                 dbusSend: "string:héllo", dbusSendValue: .string("héllo"), gvariant: "<'from gdbus'>", gvariantValue: .string("from gdbus")),
        TypeCase(signature: "o", defaultValue: .objectPath("/"), busctl: ["o", "/a/b"], busctlPrinted: "o \"/a/b\"", busctlValue: .objectPath("/a/b"),
                 dbusSend: "objpath:/c", dbusSendValue: .objectPath("/c"), gvariant: "<objectpath '/d/e'>", gvariantValue: .objectPath("/d/e")),
        TypeCase(signature: "g", defaultValue: .signature(""), busctl: ["g", "a{sv}"], busctlPrinted: "g \"a{sv}\"", busctlValue: .signature("a{sv}"),
                 dbusSend: nil, dbusSendValue: nil, gvariant: "<signature '(ii)'>", gvariantValue: .signature("(ii)")),
        TypeCase(signature: "as", defaultValue: .array(of: .string, []), busctl: ["as", "2", "a", "b"], busctlPrinted: "as 2 \"a\" \"b\"",
                 busctlValue: .array(of: .string, [.string("a"), .string("b")]),
                 dbusSend: nil, dbusSendValue: nil, gvariant: "<['x', 'y', 'z']>",
                 gvariantValue: .array(of: .string, [.string("x"), .string("y"), .string("z")])),
        TypeCase(signature: "a{sv}", defaultValue: .vardict([:]), busctl: ["a{sv}", "2", "k", "i", "1", "name", "s", "x"],
                 busctlPrinted: "a{sv} 2 \"k\" i 1 \"name\" s \"x\"",
                 busctlValue: .dictionary(key: .string, value: .variant, [
                     DictionaryEntry(.string("k"), .variant(.int32(1))), DictionaryEntry(.string("name"), .variant(.string("x"))),
                 ]),
                 dbusSend: nil, dbusSendValue: nil, gvariant: "<{'on': <true>}>",
                 gvariantValue: .dictionary(key: .string, value: .variant, [DictionaryEntry(.string("on"), .variant(.boolean(true)))])),
        TypeCase(signature: "a{si}", defaultValue: .dictionary(key: .string, value: .int32, []), busctl: ["a{si}", "2", "a", "1", "b", "2"],
                 busctlPrinted: "a{si} 2 \"a\" 1 \"b\" 2",
                 busctlValue: .dictionary(key: .string, value: .int32, [
                     DictionaryEntry(.string("a"), .int32(1)), DictionaryEntry(.string("b"), .int32(2)),
                 ]),
                 dbusSend: nil, dbusSendValue: nil, gvariant: "<{'z': 26}>",
                 gvariantValue: .dictionary(key: .string, value: .int32, [DictionaryEntry(.string("z"), .int32(26))])),
        TypeCase(signature: "(si)", defaultValue: .structure([.string(""), .int32(0)]), busctl: ["(si)", "x", "7"], busctlPrinted: "(si) \"x\" 7",
                 busctlValue: .structure([.string("x"), .int32(7)]),
                 dbusSend: nil, dbusSendValue: nil, gvariant: "<('y', 8)>", gvariantValue: .structure([.string("y"), .int32(8)])),
        TypeCase(signature: "aai", defaultValue: .array(of: .array(.int32), []), busctl: ["aai", "2", "2", "1", "2", "1", "3"],
                 busctlPrinted: "aai 2 2 1 2 1 3",
                 busctlValue: .array(of: .array(.int32), [.array(of: .int32, [.int32(1), .int32(2)]), .array(of: .int32, [.int32(3)])]),
                 dbusSend: nil, dbusSendValue: nil, gvariant: "<[[5], [6, 7]]>",
                 gvariantValue: .array(of: .array(.int32), [.array(of: .int32, [.int32(5)]), .array(of: .int32, [.int32(6), .int32(7)])])),
        TypeCase(signature: "ay", defaultValue: .bytes([]), busctl: ["ay", "3", "1", "2", "255"], busctlPrinted: "ay 3 1 2 255",
                 busctlValue: .bytes([1, 2, 255]),
                 dbusSend: nil, dbusSendValue: nil, gvariant: "<[byte 0x01, 0x02]>", gvariantValue: .bytes([1, 2])),
    ]

    /// A property whose type is itself `v`: its value is a variant, so on the wire a Set carries
    /// a variant inside the Set's variant. Kept apart from ``cases`` so that a failure here does
    /// not hide the other types.
    static let variantCase = TypeCase(signature: "v", defaultValue: .variant(.string("")), busctl: ["v", "i", "42"], busctlPrinted: "v i 42",
                                      busctlValue: .variant(.int32(42)),
                                      dbusSend: nil, dbusSendValue: nil, gvariant: "<<'inner'>>", gvariantValue: .variant(.string("inner")))

    private func key(_ typeCase: TypeCase) -> String { Self.group + "." + typeCase.name }
    private var groupPath: String { PropBusAPI.rootPath + "/types/all" }

    private func createAll() async throws {
        for typeCase in Self.cases {
            try await client.create(key(typeCase), typeCase.signature, default: typeCase.defaultValue)
        }
        try await client.create(Self.group + ".fixed", "s", default: .string("constant"), options: ["writable": .boolean(false)])
    }

    func testVariantTypedPropertyIsCreatedWithAVariantDefault() async throws {
        let typeCase = Self.variantCase
        try await client.create(key(typeCase), "v", default: typeCase.defaultValue)
        let value = try await client.get(key(typeCase))
        XCTAssertEqual(value, typeCase.defaultValue)
        let xml = try await client.introspect(groupPath)
        XCTAssertTrue(xml.contains("<property name=\"k_v\" type=\"v\" access=\"readwrite\""), xml)
    }

    func testVariantTypedPropertyRoundTripsThroughBusctlAndGdbus() async throws {
        let typeCase = Self.variantCase
        try await client.create(key(typeCase), "v", default: typeCase.defaultValue)
        let set = try await busctl(["set-property", PropBusAPI.busName, groupPath, PropBusAPI.values, typeCase.name] + typeCase.busctl)
        XCTAssertTrue(set.succeeded, "\(set)")
        let get = try await busctl(["get-property", PropBusAPI.busName, groupPath, PropBusAPI.values, typeCase.name])
        XCTAssertEqual(get.stdout.trimmingCharacters(in: .whitespacesAndNewlines), typeCase.busctlPrinted, "\(get)")
        let afterBusctl = try await client.get(key(typeCase))
        XCTAssertEqual(afterBusctl, typeCase.busctlValue)
        let gdbus = try await gdbusCall(groupPath, "\(PropBusAPI.properties).Set", [PropBusAPI.values, typeCase.name, typeCase.gvariant])
        XCTAssertTrue(gdbus.succeeded, "\(gdbus)")
        let afterGdbus = try await client.get(key(typeCase))
        XCTAssertEqual(afterGdbus, typeCase.gvariantValue)
        // A plain string is not a variant: the property's type is 'v'.
        await assertDBusError(PropBusAPI.standard("InvalidArgs"), containing: ["types.all.k_v", "'v'", "'s'"]) {
            try await self.client.set(self.key(typeCase), .string("bare"))
        }
    }

    func testEveryTypeReadsBackItsDefault() async throws {
        try await createAll()
        for typeCase in Self.cases {
            let value = try await client.get(key(typeCase))
            XCTAssertEqual(value, typeCase.defaultValue, "default of \(typeCase.signature)")
        }
    }

    func testBusctlSetPropertyAndGetPropertyRoundTripEveryType() async throws {
        try await createAll()
        for typeCase in Self.cases {
            let set = try await busctl(["set-property", PropBusAPI.busName, groupPath, PropBusAPI.values, typeCase.name] + typeCase.busctl)
            XCTAssertTrue(set.succeeded, "busctl set-property \(typeCase.signature): \(set)")
            let get = try await busctl(["get-property", PropBusAPI.busName, groupPath, PropBusAPI.values, typeCase.name])
            XCTAssertTrue(get.succeeded, "busctl get-property \(typeCase.signature): \(get)")
            XCTAssertEqual(get.stdout.trimmingCharacters(in: .whitespacesAndNewlines), typeCase.busctlPrinted, "busctl get-property \(typeCase.signature)")
            let value = try await client.get(key(typeCase))
            XCTAssertEqual(value, typeCase.busctlValue, "value set by busctl, type \(typeCase.signature)")
        }
    }

    func testDbusSendSetWorksForEveryTypeItCanExpress() async throws {
        try await createAll()
        for typeCase in Self.cases {
            guard let argument = typeCase.dbusSend, let expected = typeCase.dbusSendValue else { continue }
            let result = try await dbusSend([groupPath, "\(PropBusAPI.properties).Set",
                                             "string:\(PropBusAPI.values)", "string:\(typeCase.name)", "variant:\(argument)"])
            XCTAssertTrue(result.succeeded, "dbus-send Set \(typeCase.signature): \(result)")
            let value = try await client.get(key(typeCase))
            XCTAssertEqual(value, expected, "value set by dbus-send, type \(typeCase.signature)")
        }
    }

    func testDbusSendGetPrintsTheValue() async throws {
        try await createAll()
        try await client.set(Self.group + ".k_s", .string("printed"))
        let result = try await dbusSend([groupPath, "\(PropBusAPI.properties).Get", "string:\(PropBusAPI.values)", "string:k_s"])
        XCTAssertTrue(result.succeeded, "\(result)")
        XCTAssertTrue(result.stdout.contains("variant       string \"printed\""), result.stdout)
    }

    func testGdbusSetRoundTripsEveryTypeIncludingContainersVariantsAndBytes() async throws {
        try await createAll()
        for typeCase in Self.cases {
            let result = try await gdbusCall(groupPath, "\(PropBusAPI.properties).Set", [PropBusAPI.values, typeCase.name, typeCase.gvariant])
            XCTAssertTrue(result.succeeded, "gdbus Set \(typeCase.signature): \(result)")
            let value = try await client.get(key(typeCase))
            XCTAssertEqual(value, typeCase.gvariantValue, "value set by gdbus, type \(typeCase.signature)")
        }
    }

    func testGetAllReturnsEveryTypedValue() async throws {
        try await createAll()
        let all = try await client.getAll(group: Self.group)
        XCTAssertEqual(all.count, Self.cases.count + 1)
        for typeCase in Self.cases {
            XCTAssertEqual(all[typeCase.name], typeCase.defaultValue, "GetAll \(typeCase.signature)")
        }
        XCTAssertEqual(all["fixed"], .string("constant"))
    }

    func testIntrospectionListsEachPropertyWithItsRealTypeAccessAndTheChangeAnnotation() async throws {
        try await createAll()
        let xml = try await client.introspect(groupPath)
        for typeCase in Self.cases {
            XCTAssertTrue(xml.contains("<property name=\"\(typeCase.name)\" type=\"\(typeCase.signature)\" access=\"readwrite\""),
                          "no readwrite property \(typeCase.name) of type \(typeCase.signature) in:\n\(xml)")
        }
        XCTAssertTrue(xml.contains("<property name=\"fixed\" type=\"s\" access=\"read\""), xml)
        let values = try XCTUnwrap(xml.range(of: "<interface name=\"\(PropBusAPI.values)\">"), xml)
        let valuesInterface = xml[values.upperBound...].prefix { _ in true }
        let end = valuesInterface.range(of: "</interface>")?.lowerBound ?? valuesInterface.endIndex
        XCTAssertTrue(valuesInterface[..<end].contains("<annotation name=\"org.freedesktop.DBus.Property.EmitsChangedSignal\" value=\"true\"/>"),
                      "Values interface lacks EmitsChangedSignal=true:\n\(xml)")
        for member in ["Reset", "GetWithRevision", "CompareAndSet"] {
            XCTAssertTrue(valuesInterface[..<end].contains("<method name=\"\(member)\">"), "no \(member) in:\n\(xml)")
        }
    }

    func testBusctlIntrospectShowsTypesAndWritability() async throws {
        try await createAll()
        let result = try await busctl(["introspect", PropBusAPI.busName, groupPath, PropBusAPI.values])
        XCTAssertTrue(result.succeeded, "\(result)")
        let rows = result.stdout.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true).map(String.init) }
        for typeCase in Self.cases {
            let row = rows.first { $0.first == "." + typeCase.name }
            XCTAssertEqual(row?[1], "property", "row of \(typeCase.name): \(row ?? [])")
            XCTAssertEqual(row?[2], typeCase.signature, "row of \(typeCase.name): \(row ?? [])")
            XCTAssertEqual(row?.suffix(2), ["emits-change", "writable"], "row of \(typeCase.name): \(row ?? [])")
        }
        let fixed = rows.first { $0.first == ".fixed" }
        XCTAssertEqual(fixed?.last, "emits-change", "read-only row: \(fixed ?? [])")
    }

    func testRootIntrospectionListsGroupsAsChildNodes() async throws {
        try await createAll()
        let root = try await client.introspect(PropBusAPI.rootPath)
        XCTAssertTrue(root.contains("<node name=\"types\"/>"), root)
        let middle = try await client.introspect(PropBusAPI.rootPath + "/types")
        XCTAssertTrue(middle.contains("<node name=\"all\"/>"), middle)
        let tree = try await busctl(["tree", PropBusAPI.busName])
        XCTAssertTrue(tree.succeeded, "\(tree)")
        XCTAssertTrue(tree.stdout.contains("/org/propbus/PropBus1/types/all"), tree.stdout)
    }
}
