import DBus
@testable import Etcd
import PropBus
@testable import PropBusFleet
import XCTest

/// Who wrote a fleet value, on the wire: the record's size (etcd stores, answers and sends it to
/// every watch with each value), every field read back, and hosts of either format reading each
/// other. Pure: no etcd.
final class FleetAttributionTests: XCTestCase {
    let layout = FleetLayout(prefix: "/bench/")
    let x = try! Key("bench.x")
    let time: Int64 = 1_796_160_000_123_456_789

    /// The caller of bench/fleet.sh's Sets, as host A describes it (bench/fleet.sh --wire).
    let benchCaller = WriteSet.Caller(via: "Set", busName: ":1.12", userID: 0, userName: "root", processID: 48213,
                                      command: "fleet-latency", executable: "/work/wt/attr25/bench/build/fleet-latency", host: "a")

    private func entry(_ value: Int32) -> PropertyModel.Entry {
        var definition = PropertyDefinition(key: x, type: .int32, defaultValue: .int32(0))
        definition.scope = .fleet
        return PropertyModel.Entry(definition: definition, storedValue: .int32(value), revision: 1)
    }

    /// The txn a plain Set of `bench.x` sends, as the gateway gets it.
    private func plainSetBody(_ caller: WriteSet.Caller) throws -> [UInt8] {
        let plan = try layout.transaction(before: [x: entry(1)], after: [x: entry(7)], read: [], attribution: caller, time: time,
                                          isFleet: { _ in true }, known: { _ in FleetRevisions(value: 1234, definition: 3) })
        return TxnBodyWriter.body(compares: plan.compares, success: plan.success, failure: plan.failure)
    }

    // MARK: Size

    func testAPlainSetsTxnTakesAtMost482Bytes() throws {
        // 696 bytes with the a{sv} attribution (208 of the value's 220 bytes, its field names and
        // signatures among them) and each compare's "result":"EQUAL"; the floor's txn, with a
        // bare value and no "result", 376.
        let body = try plainSetBody(benchCaller)
        XCTAssertLessThanOrEqual(body.count, 482, String(decoding: body, as: UTF8.self))
    }

    func testAnAttributedValueTakesAtMost85Bytes() {
        let bytes = FleetLayout.encodeValue(.int32(7), attribution: benchCaller, time: time)
        XCTAssertLessThanOrEqual(bytes.count, 85, "the 0xA7 frame (5), the value (7) and the attribution")
    }

    func testADeleterRecordTakesAtMost73Bytes() {
        var deleter = benchCaller
        deleter.via = "DeleteProperty"
        XCTAssertLessThanOrEqual(FleetLayout.encodeDeleter(deleter, time: time).count, 73, "219 as an a{sv}")
    }

    // MARK: Every field read back

    func testEveryFieldReadsBackAbsentEmptyNonASCIIAndLongOnesIncluded() throws {
        let long = String(repeating: "/très-long-chemin", count: 300)
        let callers = [
            benchCaller,
            WriteSet.Caller(via: "", busName: ""),
            WriteSet.Caller(via: "Set", busName: ":1.7", userID: 0, userName: "", processID: 0, command: "", executable: "", unit: "", host: ""),
            WriteSet.Caller(via: "SomeFutureMethod", busName: ":1.99999", userID: UInt32.max, userName: "jürgen", processID: UInt32.max,
                            command: "prop ctl", executable: "/usr/bin/propctl", unit: "app-gnome-org.gnome.Terminal-4242.scope", host: "kiosk-3.example"),
            WriteSet.Caller(via: "Apply", busName: ":1.3", userID: 1000, command: "python3", executable: "/usr/bin/python3.11"),
            WriteSet.Caller(via: "CompareAndSet", busName: ":1.3", command: "a-command-whose-name-is-long", executable: "/opt/x/a-command-whose-name-is-long"),
            WriteSet.Caller(via: "Reset", busName: ":1.4", executable: "/usr/bin/busctl", host: "日本語のホスト"),
            WriteSet.Caller(via: "Revert", busName: ":1.4", command: "busctl", executable: "busctl"),
            WriteSet.Caller(via: "Set", busName: ":1.5", command: "", executable: "/usr/bin/"),
            WriteSet.Caller(via: long, busName: long, userName: long, command: long, executable: long, unit: long, host: long),
        ]
        for caller in callers {
            for value in [DBusValue.int32(7), .string(""), .string("√ unicode ✓"), .vardict(["a": .uint64(1)])] {
                let (read, by) = try FleetLayout.decodeAttributedValue(FleetLayout.encodeValue(value, attribution: caller, time: time))
                XCTAssertEqual(read, value)
                XCTAssertEqual(by, caller)
            }
            var deleter = caller
            deleter.via = "DeleteProperty"
            let record = FleetLayout.encodeDeleter(deleter, time: 8)
            let events = [WatchEvent(kind: .put, kv: KeyValue(key: layout.deleterKey, value: record, modRevision: 30))]
            XCTAssertEqual(layout.deleters(in: events), [30: deleter])
        }
    }

    func testADefinitionAndALayerCarryTheirWriter() throws {
        var definition = PropertyDefinition(key: x, type: .int32, defaultValue: .int32(50))
        definition.scope = .fleet
        let bytes = FleetLayout.encodeDefinition(definition, attribution: benchCaller, time: time)
        XCTAssertEqual(FleetLayout.definitionCaller(bytes), benchCaller)
        XCTAssertEqual(try FleetLayout.decodeDefinition(bytes, key: x).defaultValue, .int32(50))
        XCTAssertTrue(FleetLayout.sameDefinition(bytes, FleetLayout.encodeDefinition(definition)))
        let layer = FleetLayout.encodeLayer(.int32(3), lockedFor: ["alice"], attribution: benchCaller, time: time)
        let (value, lockedFor, caller) = try FleetLayout.decodeLayer(layer)
        XCTAssertEqual(value, .int32(3))
        XCTAssertEqual(lockedFor, ["alice"])
        XCTAssertEqual(caller, benchCaller)
    }

    // MARK: Hosts of either format

    func testAnEarlierHostsAttributionStillReads() throws {
        let earlier = OlderHost.encodeValue(.int32(40), attribution: benchCaller, time: time)
        let (value, caller) = try FleetLayout.decodeAttributedValue(earlier)
        XCTAssertEqual(value, .int32(40))
        XCTAssertEqual(caller, benchCaller)
        let record = ValueCodec.encode(OlderHost.attributionFields(benchCaller, time: 8))
        XCTAssertEqual(layout.deleters(in: [WatchEvent(kind: .put, kv: KeyValue(key: layout.deleterKey, value: record, modRevision: 9))]),
                       [9: benchCaller])
        var definition = PropertyDefinition(key: x, type: .int32, defaultValue: .int32(50))
        definition.scope = .fleet
        var fields = try XCTUnwrap(ValueCodec.decode(FleetLayout.encodeDefinition(definition)).stringKeyedEntries)
        fields["by"] = OlderHost.attributionFields(benchCaller, time: 8)
        XCTAssertEqual(FleetLayout.definitionCaller(ValueCodec.encode(.vardict(fields))), benchCaller)
        let layer = ValueCodec.encode(.vardict(["value": .int32(3), "by": OlderHost.attributionFields(benchCaller, time: 8)]))
        XCTAssertEqual(try FleetLayout.decodeLayer(layer).caller, benchCaller)
    }

    func testABareValueReadsUnattributed() throws {
        for value in [DBusValue.int32(40), .string("etcdctl put"), .bytes([0xCA, 1])] {
            let (read, caller) = try FleetLayout.decodeAttributedValue(ValueCodec.encode(value))
            XCTAssertEqual(read, value)
            XCTAssertNil(caller)
        }
    }

    func testAnEarlierHostReadsEveryValueThisOneWrites() throws {
        let callers = [benchCaller, WriteSet.Caller(via: "Frobnicate", busName: "")]
        for caller in callers {
            for value in [DBusValue.int32(7), .string("ünïcode"), .array(of: .string, [.string("a")])] {
                let (read, _) = try OlderHost.decodeAttributedValue(FleetLayout.encodeValue(value, attribution: caller, time: time))
                XCTAssertEqual(read, value, "the value, whatever an earlier host makes of the attribution")
            }
        }
        var deleter = benchCaller
        deleter.via = "DeleteProperty"
        _ = OlderHost.deleter(FleetLayout.encodeDeleter(deleter, time: 8))  // unattributed or right; never a crash
        var definition = PropertyDefinition(key: x, type: .int32, defaultValue: .int32(50))
        definition.scope = .fleet
        let bytes = FleetLayout.encodeDefinition(definition, attribution: benchCaller, time: time)
        XCTAssertEqual(try ValueCodec.decode(bytes).stringKeyedEntries?["type"]?.unwrappingVariantOnce, .string("i"),
                       "an earlier host reads the definition")
    }

    func testACutOrGarbledRecordLeavesTheValueUnattributed() throws {
        let bytes = FleetLayout.encodeValue(.int32(7), attribution: benchCaller, time: time)
        let frame = 5 + 7
        // Every cut inside the record: the value alone.
        for end in frame..<bytes.count {
            let (value, caller) = try FleetLayout.decodeAttributedValue(Array(bytes[..<end]))
            XCTAssertEqual(value, .int32(7), "cut at \(end)")
            XCTAssertNil(caller, "cut at \(end)")
        }
        // Any byte changed: the value still reads; the record reads as nothing or as a caller, never a crash.
        for index in frame..<bytes.count {
            for replacement: UInt8 in [0x00, 0x01, 0x7F, 0x80, 0xC0, 0xFF] {
                var garbled = bytes
                garbled[index] = replacement
                XCTAssertEqual(try FleetLayout.decodeAttributedValue(garbled).value, .int32(7))
            }
        }
        let record = Array(bytes[frame...])
        XCTAssertEqual(Array(record.prefix(2)), [0xCA, 1], "the marker and the version")
        // The smallest record, then the same with one thing wrong.
        let smallest: [UInt8] = [0xCA, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        XCTAssertEqual(try FleetLayout.decodeAttributedValue(Array(bytes[..<frame]) + smallest).caller, WriteSet.Caller(via: "Set", busName: ""))
        let garbled: [(String, [UInt8])] = [
            ("another marker", [0xCB] + smallest.dropFirst()),
            ("a later version", [0xCA, 2] + smallest.dropFirst(2)),
            ("an unknown method code", [0xCA, 1, 0x7E] + smallest.dropFirst(3)),
            ("a byte after the last field", smallest + [0]),
            ("a length past the end", [0xCA, 1, 1, 0x7F] + smallest.dropFirst(4)),
            ("a number of eleven bytes", [0xCA, 1, 1, 0] + [UInt8](repeating: 0xFF, count: 10) + [1] + smallest.dropFirst(5)),
            ("a uid above 32 bits", [0xCA, 1, 1, 0, 0x81, 0x80, 0x80, 0x80, 0x10] + smallest.dropFirst(5)),
            ("text that is not UTF-8", [0xCA, 1, 1, 2, 0xC3, 0x28] + smallest.dropFirst(4)),
            ("comm from an absent exe", [0xCA, 1, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0]),
            ("a whole record cut short", Array(record.dropLast())),
            ("nothing", []),
        ]
        for (what, trailer) in garbled {
            let (value, caller) = try FleetLayout.decodeAttributedValue(Array(bytes[..<frame]) + trailer)
            XCTAssertEqual(value, .int32(7), what)
            XCTAssertNil(caller, what)
            let events = [WatchEvent(kind: .put, kv: KeyValue(key: layout.deleterKey, value: trailer, modRevision: 9))]
            XCTAssertEqual(layout.deleters(in: events), [:], what)
        }
        XCTAssertThrowsError(try FleetLayout.decodeAttributedValue(Array(bytes.prefix(frame - 1))), "the value itself cut")
    }
}

/// What a host of the a{sv} format (main at 465f0ac) writes and reads, kept as the oracle of
/// mixed versions: every host of either format must read the other's values.
private enum OlderHost {
    static func attributionFields(_ caller: WriteSet.Caller, time: Int64) -> DBusValue {
        var fields = caller.fields
        fields["via"] = .string(caller.via)
        fields["time"] = .int64(time)
        return .vardict(fields)
    }

    static func encodeValue(_ value: DBusValue, attribution: WriteSet.Caller, time: Int64) -> [UInt8] {
        let encoded = ValueCodec.encode(value)
        var output: [UInt8] = [0xA7]
        withUnsafeBytes(of: UInt32(encoded.count).littleEndian) { output.append(contentsOf: $0) }
        return output + encoded + ValueCodec.encode(attributionFields(attribution, time: time))
    }

    static func caller(ofAttribution value: DBusValue) -> WriteSet.Caller? {
        guard let fields = value.stringKeyedEntries?.mapValues(\.unwrappingVariant) else { return nil }
        return WriteSet.Caller(via: fields["via"]?.stringValue ?? "", fields: fields)
    }

    static func deleter(_ bytes: [UInt8]) -> WriteSet.Caller? {
        (try? ValueCodec.decode(bytes)).flatMap(caller(ofAttribution:))
    }

    static func decodeAttributedValue(_ bytes: [UInt8]) throws -> (value: DBusValue, caller: WriteSet.Caller?) {
        guard bytes.first == 0xA7 else { return (try ValueCodec.decode(bytes), nil) }
        guard bytes.count >= 5 else { throw ValueCodecError("an attributed value of \(bytes.count) bytes") }
        let length = Int(bytes[1]) | Int(bytes[2]) << 8 | Int(bytes[3]) << 16 | Int(bytes[4]) << 24
        guard length <= bytes.count - 5 else { throw ValueCodecError("an attributed value's length \(length) passes its end") }
        let value = try ValueCodec.decode(Array(bytes[5..<5 + length]))
        return (value, (try? ValueCodec.decode(Array(bytes[(5 + length)...]))).flatMap(caller(ofAttribution:)))
    }
}

extension FleetAttributionTests {
    func testAHostReadingTheSameWriterAgainReadsWhatEachRecordSays() throws {
        var other = benchCaller
        other.busName = ":1.13"  // as long as the first: only a byte differs
        var unix = benchCaller
        unix.via = "Apply"
        let values: [[UInt8]] = [
            FleetLayout.encodeValue(.int32(1), attribution: benchCaller, time: time),
            FleetLayout.encodeValue(.int32(2), attribution: benchCaller, time: time + 1),
            FleetLayout.encodeValue(.int32(3), attribution: benchCaller, time: 5),
            FleetLayout.encodeValue(.int32(4), attribution: other, time: time),
            FleetLayout.encodeValue(.int32(5), attribution: benchCaller, time: time),
            FleetLayout.encodeValue(.int32(6), attribution: unix, time: time),
            FleetLayout.encodeValue(.int32(7), attribution: benchCaller, time: time).dropLast().map { $0 },  // cut in its time
            FleetLayout.encodeValue(.int32(8), attribution: benchCaller, time: time) + [0],  // a byte after its time
            ValueCodec.encode(.int32(9)),
            OlderHost.encodeValue(.int32(10), attribution: other, time: time),
            FleetLayout.encodeValue(.int32(11), attribution: benchCaller, time: time),
        ]
        var last = FleetAttribution.LastRead()
        for bytes in values {
            let alone = try FleetLayout.decodeAttributedValue(bytes)
            let reusing = try FleetLayout.decodeAttributedValue(bytes, reusing: &last)
            XCTAssertEqual(reusing.value, alone.value)
            XCTAssertEqual(reusing.caller, alone.caller, "\(alone.value)")
        }
        let record = FleetAttribution.encode(benchCaller, time: 77)
        XCTAssertEqual(FleetAttribution.decode(record[...], reusing: &last)?.time, 77)
        XCTAssertEqual(FleetAttribution.decode(FleetAttribution.encode(benchCaller, time: -1)[...], reusing: &last)?.time, -1)
    }
}
