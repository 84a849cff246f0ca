import CDBus
import XCTest

@testable import DBus

/// ``MessageBodyWriter`` writes the same bytes as building ``DBusValue``s and appending them,
/// counts the same size the tree's sizing uses (``DBusValue/wireSize(at:)``), and stops at its
/// limit: big replies are streamed through it.
final class MessageBodyWriterTests: XCTestCase {
    private func makeMessage() throws -> Message {
        try Message.methodCall(destination: "org.propbus.Test", path: "/org/propbus/Test", interface: "org.propbus.Test", member: "Echo")
    }

    /// The marshalled body of `message`: the bytes after the header, which is padded to 8.
    private func body(of message: Message) -> [UInt8] { message.marshalledBody() }

    /// One `ListProperties` row and a `GetManagedObjects`-like nesting, as values.
    private let values: [DBusValue] = [
        .array(of: .structure([.string, .string, .variant, .dictionary(key: .string, value: .variant)]), [
            .structure([.string("a.b"), .string("i"), .variant(.int32(7)),
                        .dictionary(key: .string, value: .variant, [
                            DictionaryEntry(.string("default"), .variant(.int32(1))),
                            DictionaryEntry(.string("description"), .variant(.string("héllo"))),
                            DictionaryEntry(.string("is_set"), .variant(.boolean(true))),
                            DictionaryEntry(.string("revision"), .variant(.uint64(42))),
                            DictionaryEntry(.string("choices"), .variant(.array(of: .variant, [.variant(.int32(1)), .variant(.string("x"))]))),
                        ])]),
            .structure([.string("a.c"), .string("(sd)"), .variant(.structure([.string("z"), .double(2.5)])),
                        .dictionary(key: .string, value: .variant, [])]),
        ]),
        .dictionary(key: .objectPath, value: .dictionary(key: .string, value: .variant), [
            DictionaryEntry(.objectPath("/o/a"), .dictionary(key: .string, value: .variant, [
                DictionaryEntry(.string("x"), .variant(.bytes([1, 2, 3]))),
            ])),
        ]),
    ]

    /// Writes ``values`` through the writer's calls.
    private func write(_ writer: inout MessageBodyWriter) {
        writer.array(of: "(ssva{sv})", alignment: 8) { rows in
            rows.structure { row in
                row.string("a.b"); row.string("i"); row.variant(.int32(7))
                row.dictionary("{sv}") { items in
                    items.entry("default", .int32(1))
                    items.entry("description", string: "héllo")
                    items.entry("is_set", boolean: true)
                    items.entry("revision", uint64: 42)
                    items.entry("choices", .array(of: .variant, [.variant(.int32(1)), .variant(.string("x"))]))
                }
            }
            rows.structure { row in
                row.string("a.c"); row.string("(sd)"); row.variant(.structure([.string("z"), .double(2.5)]))
                row.dictionary("{sv}") { _ in }
            }
        }
        writer.dictionary("{oa{sv}}") { paths in
            paths.entry { entry in
                entry.objectPath("/o/a")
                entry.dictionary("{sv}") { $0.entry("x", .bytes([1, 2, 3])) }
            }
        }
    }

    func testWritesTheBytesOfTheValuesItStandsFor() throws {
        let expected = try makeMessage()
        try expected.append(values)
        let streamed = try makeMessage()
        var writer = MessageBodyWriter.appending(to: streamed, limit: .max, arrayLimit: .max)
        write(&writer)
        XCTAssertNil(writer.failure)
        XCTAssertFalse(writer.overflowed)
        XCTAssertEqual(streamed.signature, expected.signature)
        XCTAssertEqual(try streamed.arguments(), values)
        XCTAssertEqual(body(of: streamed), body(of: expected))
        // The size it counts is the body's length, as the tree's sizing of values says.
        XCTAssertEqual(writer.size, body(of: expected).count)
        var offset = 0
        for value in values { offset += value.wireSize(at: offset) }
        XCTAssertEqual(writer.size, offset)
        var counter = MessageBodyWriter.counting()
        write(&counter)
        XCTAssertEqual(counter.size, offset)
    }

    /// Every kind of value, nested, at every alignment: what a buffered writer marshals by hand.
    private let mixed: [DBusValue] = [
        .byte(7), .int16(-2), .boolean(true), .uint16(9), .int64(-5), .byte(1), .double(-0.0), .uint32(3), .uint64(.max),
        .int32(-1), .signature("a{sv}"), .objectPath("/a/b"), .string(""), .string("é\u{301}K"),
        .variant(.variant(.int16(4))), .bytes([]), .bytes([9, 8]),
        .array(of: .int64, []), .array(of: .structure([.byte, .double]), [.structure([.byte(1), .double(.nan)])]),
        .dictionary(key: .string, value: .variant, []),
        .dictionary(key: .uint16, value: .array(.string), [DictionaryEntry(.uint16(1), .array(of: .string, [.string("x")]))]),
        .structure([.byte(2), .structure([.int16(3)]), .variant(.array(of: .variant, [.variant(.objectPath("/"))]))]),
    ]

    /// A buffered writer's body as the message libdbus makes from it.
    private func buffered(_ write: (inout MessageBodyWriter) -> Void, signature: String) throws -> (Message, MessageBodyWriter) {
        var writer = MessageBodyWriter.buffered(limit: .max, arrayLimit: .max)
        write(&writer)
        XCTAssertNil(writer.failure)
        return (try makeMessage().replacingBody(with: try XCTUnwrap(writer.buffer), signature: signature), writer)
    }

    func testABufferedBodyIsTheSameBytesAsOneAppendedThroughLibdbus() throws {
        for (values, write) in [(values, self.write), (mixed, { (writer: inout MessageBodyWriter) in
            for value in self.mixed { writer.value(value) }
        })] {
            let expected = try makeMessage()
            try expected.append(values)
            let signature = values.map(\.signature).joined()
            let (made, writer) = try buffered(write, signature: signature)
            XCTAssertEqual(made.serial, 0, "the serial is given when it is sent")
            XCTAssertEqual(made.signature, signature)
            XCTAssertEqual(try made.arguments(), values)
            XCTAssertEqual(body(of: made), body(of: expected))
            XCTAssertEqual(writer.size, body(of: expected).count)
        }
    }

    func testABufferedBodyThatDoesNotMatchItsSignatureIsRefused() throws {
        var writer = MessageBodyWriter.buffered(limit: .max, arrayLimit: .max)
        writer.string("a")
        XCTAssertThrowsError(try makeMessage().replacingBody(with: try XCTUnwrap(writer.buffer), signature: "u"))
    }

    func testABufferedWriterRefusesUnixFDsAndNuls() throws {
        var fds = MessageBodyWriter.buffered(limit: .max, arrayLimit: .max)
        fds.variant(.unixFD(0))
        XCTAssertNotNil(fds.failure, "an fd travels beside the body: a buffer cannot carry it")
        var nul = MessageBodyWriter.buffered(limit: .max, arrayLimit: .max)
        nul.array(of: "s", alignment: 4) { $0.string("a\u{0}b") }
        XCTAssertNotNil(nul.failure)
    }

    func testABufferedWriterStopsAtItsLimitAndCountsTheRest() throws {
        var counter = MessageBodyWriter.counting()
        write(&counter)
        var writer = MessageBodyWriter.buffered(limit: 100, arrayLimit: .max)
        write(&writer)
        XCTAssertTrue(writer.overflowed)
        XCTAssertEqual(writer.size, counter.size)
        XCTAssertLessThanOrEqual(writer.buffer?.count ?? 0, 200, "no more than the limit (and the field that passed it) was built")
        var arrays = MessageBodyWriter.buffered(limit: .max, arrayLimit: 64)
        write(&arrays)
        XCTAssertTrue(arrays.overflowed)
    }

    func testStopsAppendingAtItsLimitAndCountsTheRest() throws {
        let full = MessageBodyWriter.counting()
        var counter = full
        write(&counter)
        let message = try makeMessage()
        var writer = MessageBodyWriter.appending(to: message, limit: 100, arrayLimit: .max)
        write(&writer)
        XCTAssertTrue(writer.overflowed)
        XCTAssertEqual(writer.size, counter.size, "the whole size is still known, for the error")
        // An array above the array limit is an overflow too, whatever the message limit.
        var arrays = MessageBodyWriter.appending(to: try makeMessage(), limit: .max, arrayLimit: 64)
        write(&arrays)
        XCTAssertTrue(arrays.overflowed)
        XCTAssertGreaterThan(arrays.largestArray, 64)
    }

    func testAStringWithANulFailsInsteadOfBeingCutShort() throws {
        var writer = MessageBodyWriter.appending(to: try makeMessage(), limit: .max, arrayLimit: .max)
        writer.array(of: "s", alignment: 4) { $0.string("a\u{0}b") }
        XCTAssertNotNil(writer.failure)
    }
}
