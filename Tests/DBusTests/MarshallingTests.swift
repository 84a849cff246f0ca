import CDBus
import Foundation
import XCTest

@testable import DBus

/// Round trips of values through real libdbus messages, without a bus: append, read back, and
/// also marshal to bytes and demarshal, as a peer would receive them.
final class MarshallingTests: XCTestCase {
    // MARK: Helpers

    private func makeMessage() throws(DBus.DBusError) -> Message {
        try Message.methodCall(destination: "org.propbus.Test", path: "/org/propbus/Test",
                               interface: "org.propbus.Test", member: "Echo")
    }

    /// The marshalled bytes of `message` (`dbus_message_marshal`), with a serial set as sending
    /// would, since a received message with serial 0 is invalid.
    private func marshal(_ message: Message, file: StaticString = #filePath, line: UInt = #line) -> [UInt8] {
        if message.serial == 0 { dbus_message_set_serial(message.raw, 1) }
        var pointer: UnsafeMutablePointer<CChar>? = nil
        var length: Int32 = 0
        guard dbus_message_marshal(message.raw, &pointer, &length) != 0, let pointer else {
            XCTFail("dbus_message_marshal failed", file: file, line: line)
            return []
        }
        defer { dbus_free(pointer) }
        return pointer.withMemoryRebound(to: UInt8.self, capacity: Int(length)) {
            Array(UnsafeBufferPointer(start: $0, count: Int(length)))
        }
    }

    /// A message rebuilt from bytes (`dbus_message_demarshal`), or `nil` when libdbus refuses them.
    private func demarshal(_ bytes: [UInt8]) -> Message? {
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        defer { dbus_error_free(&error) }
        let raw = bytes.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { dbus_message_demarshal($0.baseAddress, Int32($0.count), &error) }
        }
        guard let raw else {
            XCTAssertNotEqual(dbus_error_is_set(&error), 0, "a refused message sets the error")
            return nil
        }
        return Message(owning: raw)
    }

    /// The body length from the fixed header: byte 0 is the endianness, bytes 4…7 the length.
    private func bodyLength(of bytes: [UInt8]) -> Int {
        let field = bytes[4 ..< 8].map(Int.init)
        if bytes[0] == UInt8(ascii: "l") {
            return field[0] | field[1] << 8 | field[2] << 16 | field[3] << 24
        }
        return field[3] | field[2] << 8 | field[1] << 16 | field[0] << 24
    }

    /// Appends `values`, reads them back directly and through marshalled bytes, and checks both
    /// equal the input and the body signature is the concatenation of the values' signatures.
    private func assertRoundTrips(_ values: [DBusValue], file: StaticString = #filePath, line: UInt = #line) {
        do {
            let message = try makeMessage()
            try message.append(values)
            XCTAssertEqual(message.signature, values.map(\.signature).joined(), file: file, line: line)
            XCTAssertEqual(try message.arguments(), values, "read back directly", file: file, line: line)
            guard let received = demarshal(marshal(message, file: file, line: line)) else {
                return XCTFail("libdbus refused the marshalled bytes of \(values.map(\.signature))", file: file, line: line)
            }
            XCTAssertEqual(try received.arguments(), values, "read back from bytes", file: file, line: line)
        } catch {
            XCTFail("round trip of \(values.map(\.signature)) threw \(error)", file: file, line: line)
        }
    }

    private func assertRoundTrips(_ value: DBusValue, file: StaticString = #filePath, line: UInt = #line) {
        assertRoundTrips([value], file: file, line: line)
    }

    private func assertAppendFails(_ value: DBusValue, containing reason: String,
                                   file: StaticString = #filePath, line: UInt = #line) {
        do throws(DBus.DBusError) {
            let message = try makeMessage()
            try message.append([value])
            XCTFail("appending \(value.signature) succeeded", file: file, line: line)
        } catch {
            XCTAssertEqual(error.name, DBus.DBusError.Name.invalidArgs, file: file, line: line)
            XCTAssertTrue(error.message.contains(reason), error.message, file: file, line: line)
        }
    }

    private func nestedArray(_ depth: Int, around inner: DBusValue) -> DBusValue {
        var value = inner
        for _ in 0 ..< depth { value = .array(element: value.type, [value]) }
        return value
    }

    private func nestedVariant(_ depth: Int, around inner: DBusValue) -> DBusValue {
        var value = inner
        for _ in 0 ..< depth { value = .variant(value) }
        return value
    }

    // MARK: Basic types

    func testEveryBasicTypeRoundTripsAtItsExtremes() {
        assertRoundTrips([
            .byte(0), .byte(.max),
            .boolean(false), .boolean(true),
            .int16(.min), .int16(.max), .uint16(0), .uint16(.max),
            .int32(.min), .int32(.max), .uint32(0), .uint32(.max),
            .int64(.min), .int64(.max), .uint64(0), .uint64(.max),
            .double(0), .double(.infinity), .double(-.infinity), .double(.greatestFiniteMagnitude),
            .double(.leastNonzeroMagnitude), .double(-.pi),
        ])
        // Each alone too, so every type also starts the body at offset 0.
        for value: DBusValue in [.byte(7), .boolean(true), .int16(-2), .uint16(3), .int32(-4), .uint32(5),
                                 .int64(.min), .uint64(.max), .double(1.5)] {
            assertRoundTrips(value)
        }
    }

    func testDoublesKeepTheirExactBits() throws {
        let doubles: [Double] = [-0.0, .nan, -.nan, .signalingNaN, .infinity, .ulpOfOne, -.leastNormalMagnitude]
        let message = try makeMessage()
        try message.append(doubles.map { .double($0) })
        guard let received = demarshal(marshal(message)) else { return XCTFail("bytes refused") }
        let values = try received.arguments()
        XCTAssertEqual(values.count, doubles.count)
        for (sent, value) in zip(doubles, values) {
            guard case .double(let got) = value else { XCTFail("\(value) is not a double"); continue }
            // Compare bits: -0.0 == 0.0 and NaN != NaN would hide a change.
            XCTAssertEqual(got.bitPattern, sent.bitPattern, "\(sent)")
        }
    }

    func testStringsRoundTripEmptyUnicodeAndLong() {
        assertRoundTrips([
            .string(""), .string("héllo wörld"), .string("日本語のテキスト"), .string("𝄞 🎛️ 👩‍👩‍👧"),
            .string("tab\tnewline\nquote\"backslash\\"), .string("\u{7F}\u{80}\u{FFFD}"),
            .string(String(repeating: "x", count: 100_000)),
        ])
    }

    func testObjectPathsAndSignaturesRoundTrip() {
        assertRoundTrips([
            .objectPath("/"), .objectPath("/org/propbus/PropBus1/ui/switch"), .objectPath("/_/A9"),
            .signature(""), .signature("a{sv}"), .signature("a(ssva{sv})"), .signature(String(repeating: "i", count: 255)),
        ])
    }

    func testUnixFDsAreDuplicatedOnTheWayIn() throws {
        let message = try makeMessage()
        try message.append([.unixFD(STDERR_FILENO)])
        XCTAssertEqual(message.signature, "h")
        let values = try message.arguments()
        guard case .unixFD(let fd) = values.first else { return XCTFail("\(values)") }
        // libdbus dups the descriptor both when appending and when reading.
        XCTAssertGreaterThanOrEqual(fd, 0)
        XCTAssertNotEqual(fd, STDERR_FILENO)
        close(fd)
    }

    // MARK: Containers

    func testArraysOfEveryShapeRoundTrip() {
        assertRoundTrips(.array(of: .string, [.string("a"), .string(""), .string("ç")]))
        assertRoundTrips(.array(of: .string, []))
        assertRoundTrips(.array(of: .int64, []))
        assertRoundTrips(.array(of: .double, [.double(1), .double(-2)]))
        assertRoundTrips(.array(of: .boolean, [.boolean(true), .boolean(false)]))
        assertRoundTrips(.array(of: .objectPath, [.objectPath("/a"), .objectPath("/b/c")]))
        assertRoundTrips(.array(of: .array(.int32), [
            .array(of: .int32, [.int32(1), .int32(2)]), .array(of: .int32, []), .array(of: .int32, [.int32(.min)]),
        ]))
        assertRoundTrips(.array(of: .array(.int32), []))
        assertRoundTrips(.array(of: .variant, [.variant(.string("s")), .variant(.int32(1)), .variant(.bytes([1]))]))
    }

    func testDictionariesRoundTrip() {
        assertRoundTrips(.vardict(["b": .boolean(true), "i": .int32(-1), "s": .string("x"), "ay": .bytes([1, 2])]))
        assertRoundTrips(.vardict([:]))
        assertRoundTrips(.dictionary(key: .string, value: .int32, [
            DictionaryEntry(.string("one"), .int32(1)), DictionaryEntry(.string("two"), .int32(2)),
        ]))
        assertRoundTrips(.dictionary(key: .int32, value: .boolean, [
            DictionaryEntry(.int32(.min), .boolean(true)), DictionaryEntry(.int32(0), .boolean(false)),
        ]))
        assertRoundTrips(.dictionary(key: .uint64, value: .array(.byte), [DictionaryEntry(.uint64(.max), .bytes([]))]))
        assertRoundTrips(.dictionary(key: .objectPath, value: .double, [DictionaryEntry(.objectPath("/p"), .double(2))]))
        // Dictionaries keep wire order, duplicates included.
        assertRoundTrips(.dictionary(key: .string, value: .string, [
            DictionaryEntry(.string("z"), .string("1")), DictionaryEntry(.string("a"), .string("2")),
            DictionaryEntry(.string("z"), .string("3")),
        ]))
    }

    func testStructsRoundTrip() {
        assertRoundTrips(.structure([.string("s"), .int32(1)]))
        assertRoundTrips(.structure([.byte(1)]))
        assertRoundTrips(.structure([
            .structure([.string("a"), .structure([.int64(-1), .double(0.5)])]),
            .structure([.byte(2)]),
            .array(of: .structure([.string, .int32]), [.structure([.string("x"), .int32(3)])]),
        ]))
    }

    func testVariantsRoundTripNestedAndAroundContainers() {
        assertRoundTrips(.variant(.int32(1)))
        assertRoundTrips(.variant(.variant(.variant(.string("deep")))))
        assertRoundTrips(.variant(.vardict(["k": .variant(.array(of: .string, [.string("v")]))])))
        assertRoundTrips(.variant(.structure([.variant(.bytes([9])), .signature("v")])))
        assertRoundTrips(nestedVariant(64, around: .int32(1)))
    }

    func testByteArraysRoundTripEmptyAndLarge() {
        assertRoundTrips(.bytes([]))
        assertRoundTrips(.bytes([0, 0xFF, 0x7F, 0x80]))
        let mebibyte = (0 ..< (1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        assertRoundTrips(.bytes(mebibyte))
        assertRoundTrips(.array(of: .array(.byte), [.bytes([1]), .bytes([]), .bytes([2, 3])]))
    }

    func testNestedDictionariesAndStructsOfVariantsRoundTrip() {
        assertRoundTrips(.dictionary(key: .string, value: .dictionary(key: .string, value: .variant), [
            DictionaryEntry(.string("org.propbus.PropBus1.Values"), .vardict(["on": .boolean(true), "n": .int32(2)])),
            DictionaryEntry(.string("org.freedesktop.DBus.Properties"), .vardict([:])),
        ]))
        let record = DBusType.structure([.string, .string, .variant, .dictionary(key: .string, value: .variant)])
        assertRoundTrips(.array(of: record, [
            .structure([.string("ui.switch.on"), .string("b"), .variant(.boolean(true)), .vardict(["persistent": .boolean(true)])]),
            .structure([.string("x.y"), .string("as"), .variant(.array(of: .string, [])), .vardict([:])]),
        ]))
        assertRoundTrips(.array(of: record, []))
    }

    func testArraysThirtyTwoDeepRoundTrip() {
        assertRoundTrips(nestedArray(32, around: .int32(7)))
        assertRoundTrips(nestedArray(31, around: .bytes([1, 2])))
        // Empty at every level but the outermost.
        assertRoundTrips(.array(element: nestedArray(31, around: .int32(0)).type, []))
    }

    func testManyArgumentsRoundTripInOrder() {
        assertRoundTrips([.string("a"), .byte(1), .int64(2), .variant(.byte(3)), .bytes([4]), .structure([.byte(5)]), .double(6)])
    }

    // MARK: Malformed values throw, never trap

    func testInvalidValuesAreRefusedWithInvalidArgs() {
        assertAppendFails(.string("nul\u{0}inside"), containing: "NUL")
        assertAppendFails(.objectPath(""), containing: "not a valid object path")
        assertAppendFails(.objectPath("/trailing/"), containing: "not a valid object path")
        assertAppendFails(.objectPath("/with-dash"), containing: "not a valid object path")
        assertAppendFails(.objectPath("relative"), containing: "not a valid object path")
        assertAppendFails(.signature("a{vs}"), containing: "dict key must be a basic type")
        assertAppendFails(.signature("z"), containing: "unknown type code")
        assertAppendFails(.array(element: .string, [.string("a"), .int32(1)]), containing: "array of 's' holds a 'i'")
        assertAppendFails(.dictionary(key: .string, value: .int32, [DictionaryEntry(.int32(1), .int32(1))]), containing: "holds an entry")
        assertAppendFails(.structure([]), containing: "empty struct")
        assertAppendFails(.variant(.structure([])), containing: "empty struct")
        assertAppendFails(.vardict(["k": .string("a\u{0}")]), containing: "NUL")
        assertAppendFails(nestedArray(33, around: .int32(1)), containing: "arrays nested deeper than 32")
        assertAppendFails(nestedVariant(65, around: .int32(1)), containing: "variants nested too deeply")
    }

    func testEmptyContainersWithImpossibleDeclaredTypesAreRefused() {
        var fortyDeep = DBusType.int32
        for _ in 0 ..< 40 { fortyDeep = .array(fortyDeep) }
        assertAppendFails(.array(element: fortyDeep, []), containing: "arrays nested deeper than 32")
        assertAppendFails(.array(element: .dictionary(key: .variant, value: .string), []), containing: "dict key must be a basic type")
        assertAppendFails(.array(element: .structure([]), []), containing: "empty struct")
        assertAppendFails(.dictionary(key: .string, value: .structure([]), []), containing: "empty struct")
        let long = DBusType.structure(Array(repeating: .int32, count: 300))
        assertAppendFails(.array(element: long, []), containing: "longer than 255 bytes")
        // The declared type inside a variant is checked at the variant boundary too.
        assertAppendFails(.variant(.array(element: fortyDeep, [])), containing: "arrays nested deeper than 32")
        assertAppendFails(.vardict(["k": .array(element: .dictionary(key: .array(.string), value: .string), [])]),
                          containing: "dict key must be a basic type")
    }

    func testByteArraysCountTowardArrayDepth() {
        assertAppendFails(nestedArray(32, around: .bytes([1])), containing: "arrays nested deeper than 32")
        assertAppendFails(.array(element: nestedArray(31, around: .bytes([])).type, []), containing: "arrays nested deeper than 32")
        assertRoundTrips(nestedArray(31, around: .bytes([])))
    }

    func testArraysOfByteValuesMustUseTheBytesCase() {
        assertAppendFails(.array(element: .byte, [.byte(1)]), containing: "must be .bytes")
        assertAppendFails(.array(element: .byte, []), containing: "must be .bytes")
        assertAppendFails(.variant(.array(element: .array(.byte), [.array(element: .byte, [])])), containing: "must be .bytes")
    }

    func testAFailedAppendLeavesTheMessageUsable() throws {
        let message = try makeMessage()
        try message.append([.string("before")])
        XCTAssertThrowsError(try message.append([.structure([.string("ok"), .objectPath("bad")])]))
        XCTAssertEqual(try message.arguments(), [.string("before")])
        try message.append([.int32(2)])
        XCTAssertEqual(try message.arguments(), [.string("before"), .int32(2)])
    }

    /// Whether libdbus accepts `value` on receipt: appended without ``DBusValue/validate()``,
    /// marshalled and demarshalled.
    private func libdbusAcceptsOnReceipt(_ value: DBusValue) throws -> Bool {
        let message = try makeMessage()
        var iter = DBusMessageIter()
        dbus_message_iter_init_append(message.raw, &iter)
        try MessageIterator.append(value, to: &iter)
        return demarshal(marshal(message)) != nil
    }

    func testValidateAgreesWithLibdbusOnTotalNestingDepth() throws {
        func entry(_ value: DBusValue) -> DBusValue { .dictionary(key: .string, value: value.type, [DictionaryEntry(.string("k"), value)]) }
        // libdbus counts variants, structs, dict entries and non-empty arrays of non-fixed
        // types against one limit of 64 when it checks a received body.
        var variantDictChain = DBusValue.int32(1)
        for _ in 0 ..< 21 { variantDictChain = .variant(entry(variantDictChain)) }
        var structDictChain = DBusValue.int32(1)
        for _ in 0 ..< 22 { structDictChain = .structure([entry(structDictChain)]) }
        let cases: [(String, DBusValue)] = [
            ("64 variants", nestedVariant(64, around: .int32(1))),
            ("65 variants", nestedVariant(65, around: .int32(1))),
            ("64 variants around ai", nestedVariant(64, around: .array(of: .int32, [.int32(1)]))),
            ("64 variants around empty ai", nestedVariant(64, around: .array(of: .int32, []))),
            ("64 variants around as", nestedVariant(64, around: .array(of: .string, [.string("x")]))),
            ("64 variants around empty as", nestedVariant(64, around: .array(of: .string, []))),
            ("64 variants around ay", nestedVariant(64, around: .bytes([1]))),
            ("63 variants around (i)", nestedVariant(63, around: .structure([.int32(1)]))),
            ("64 variants around (i)", nestedVariant(64, around: .structure([.int32(1)]))),
            ("62 variants around a{si}", nestedVariant(62, around: entry(.int32(1)))),
            ("63 variants around a{si}", nestedVariant(63, around: entry(.int32(1)))),
            ("64 variants around empty a{si}", nestedVariant(64, around: .dictionary(key: .string, value: .int32, []))),
            ("32 arrays around 32 variants", nestedArray(32, around: nestedVariant(32, around: .byte(1)))),
            ("32 arrays around 33 variants", nestedArray(32, around: nestedVariant(33, around: .byte(1)))),
            ("21 levels of v a{sv}", variantDictChain),
            ("22 levels of (a{s…}) without variants", structDictChain),
        ]
        for (name, value) in cases {
            let ours = (try? value.validate()) != nil
            XCTAssertEqual(ours, try libdbusAcceptsOnReceipt(value), "\(name): validate() \(ours ? "accepts" : "refuses")")
        }
    }

    /// Set in the environment of the child run by ``testArgumentsPastTheBodySignatureLimitAreRefused``.
    private static let childEnvironmentKey = "PROPBUS_TEST_APPEND_PAST_SIGNATURE_LIMIT"

    /// In the child process only: appends arguments whose body signature would exceed 255
    /// bytes. Exits 0 when the append is refused with a thrown error, 1 when it is accepted.
    func testChildAppendsPastTheBodySignatureLimit() throws {
        guard ProcessInfo.processInfo.environment[Self.childEnvironmentKey] != nil else { return }
        let message = try makeMessage()
        try message.append(Array(repeating: DBusValue.int32(1), count: 255))
        do {
            try message.append([.int32(1)])
            exit(1)
        } catch {
            exit(0)
        }
    }

    func testArgumentsPastTheBodySignatureLimitAreRefused() throws {
        // libdbus loops forever once the header's body signature passes 255 bytes, so the
        // attempt runs in a child process that is killed if it hangs.
        let child = Process()
        child.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        child.arguments = ["DBusTests.MarshallingTests/testChildAppendsPastTheBodySignatureLimit"]
        child.environment = ProcessInfo.processInfo.environment.merging([Self.childEnvironmentKey: "1"]) { $1 }
        child.standardOutput = FileHandle.nullDevice
        child.standardError = FileHandle.nullDevice
        try child.run()
        let deadline = Date().addingTimeInterval(20)
        while child.isRunning, Date() < deadline { usleep(20_000) }
        if child.isRunning {
            child.terminate()
            child.waitUntilExit()
            XCTFail("append(_:) past the 255-byte body signature limit hangs in libdbus")
        }
        XCTAssertEqual(child.terminationReason, .exit)
        XCTAssertEqual(child.terminationStatus, 0, "the child failed")
    }

    // MARK: Corrupted bytes

    func testCorruptedBytesAreRefusedOrReadWithoutTrapping() throws {
        let message = try makeMessage()
        try message.append([
            .string("hello"), .vardict(["a": .int32(1), "b": .array(of: .string, [.string("x")])]),
            .structure([.objectPath("/p"), .signature("a{sv}"), .variant(.bytes([1, 2, 3]))]),
            .array(of: .double, [.double(1)]), .boolean(true),
        ])
        let bytes = marshal(message)
        XCTAssertNotNil(demarshal(bytes))
        var refused = 0, accepted = 0
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next() -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int(truncatingIfNeeded: state >> 33)
        }
        // Every byte set to a few interesting values, then random multi-byte corruption.
        var candidates: [[UInt8]] = []
        for index in bytes.indices {
            for replacement: UInt8 in [0x00, 0xFF, bytes[index] ^ 0x01, UInt8(ascii: "v"), UInt8(ascii: "(")] {
                var corrupted = bytes
                corrupted[index] = replacement
                candidates.append(corrupted)
            }
        }
        for _ in 0 ..< 2000 {
            var corrupted = bytes
            for _ in 0 ... next() % 4 { corrupted[next() % corrupted.count] = UInt8(truncatingIfNeeded: next()) }
            candidates.append(corrupted)
        }
        // Truncations and trailing garbage.
        for length in [0, 1, 8, 15, 16, bytes.count / 2, bytes.count - 1] { candidates.append(Array(bytes.prefix(length))) }
        candidates.append(bytes + [0, 0, 0, 0])
        for corrupted in candidates {
            guard let received = demarshal(corrupted) else { refused += 1; continue }
            accepted += 1
            // Whatever libdbus lets through must read as values or a thrown error.
            _ = try? received.arguments()
        }
        XCTAssertGreaterThan(refused, 0)
        XCTAssertGreaterThan(accepted, 0, "some corruptions (string contents) stay valid messages")
    }

    // MARK: Wire size

    func testWireSizeMatchesTheMarshalledBodyLength() throws {
        let values: [DBusValue] = [
            .byte(1), .boolean(true), .int16(1), .uint16(1), .int32(1), .uint32(1), .int64(1), .uint64(1), .double(1),
            .string(""), .string("héllo"), .objectPath("/a/b"), .signature("a{sv}"), .signature(""),
            .variant(.int32(1)), .variant(.int64(1)), .variant(.variant(.string("x"))), .variant(.structure([.byte(1), .int64(2)])),
            .bytes([]), .bytes([1, 2, 3]),
            .array(of: .int64, []), .array(of: .int64, [.int64(1), .int64(2)]), .array(of: .string, [.string("a"), .string("bc")]),
            .array(of: .structure([.byte, .int64]), [.structure([.byte(1), .int64(2)])]),
            .array(of: .structure([.byte]), []),
            .vardict([:]), .vardict(["a": .int32(1), "bb": .int64(2), "c": .bytes([1])]),
            .dictionary(key: .byte, value: .byte, [DictionaryEntry(.byte(1), .byte(2))]),
            .array(of: .dictionary(key: .string, value: .variant), [.vardict(["k": .boolean(true)]), .vardict([:])]),
            .array(of: .dictionary(key: .string, value: .int32), []),
            .array(of: .array(.int64), [.array(of: .int64, []), .array(of: .int64, [.int64(3)])]),
            .array(of: .array(.byte), [.bytes([1]), .bytes([])]),
            .structure([.byte(1), .int32(2), .byte(3), .int64(4), .string("s"), .variant(.byte(5))]),
            .structure([.structure([.byte(1)]), .structure([.int16(2)])]),
            .dictionary(key: .string, value: .dictionary(key: .string, value: .variant), [
                DictionaryEntry(.string("i"), .vardict(["p": .double(1)])),
            ]),
        ]
        // Each value alone (body offset 0), and after a leading byte so alignment padding shows.
        let prefixes: [[DBusValue]] = [[], [.byte(0)], [.int16(0)], [.int16(0), .byte(0)], [.int32(0), .byte(0)]]
        for value in values {
            for prefix in prefixes {
                let message = try makeMessage()
                try message.append(prefix + [value])
                let prefixSize = prefix.reduce(0) { $0 + $1.wireSize(at: $0) }
                let expected = prefixSize + value.wireSize(at: prefixSize)
                XCTAssertEqual(bodyLength(of: marshal(message)), expected,
                               "\(value.signature) after \(prefix.map(\.signature).joined())")
            }
        }
    }
}

/// Signature error positions are the 0-based index of the offending byte (pinned here because
/// values and messages quote them).
final class SignatureErrorPositionTests: XCTestCase {
    private func position(of text: String, file: StaticString = #filePath, line: UInt = #line) -> String? {
        do {
            _ = try Signature(validating: text)
            XCTFail("'\(text)' parsed", file: file, line: line)
            return nil
        } catch {
            return error.reason.components(separatedBy: " at position ").last
        }
    }

    func testPositionsPointAtTheOffendingByte() {
        XCTAssertEqual(position(of: "si z"), "2")
        XCTAssertEqual(position(of: "z"), "0")
        XCTAssertEqual(position(of: "a{sr}"), "3")
        XCTAssertEqual(position(of: "i)"), "1")
        XCTAssertEqual(position(of: "a}"), "1")
        XCTAssertEqual(position(of: "({sv})"), "1")
        XCTAssertEqual(position(of: "(i())"), "3")
        XCTAssertEqual(position(of: String(repeating: "a", count: 33) + "i"), "32")
        XCTAssertEqual(position(of: String(repeating: "(", count: 33) + "i" + String(repeating: ")", count: 33)), "32")
        XCTAssertEqual(position(of: "a{svs}"), "4")
        // Running out of text points just past the end.
        XCTAssertEqual(position(of: "aa"), "2")
        XCTAssertEqual(position(of: "(ii"), "3")
    }
}
