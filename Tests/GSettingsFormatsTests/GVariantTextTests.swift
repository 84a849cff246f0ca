import DBusValues
import Foundation
import GSettingsFormats
import XCTest

/// GVariant's text format read and written as GLib does, checked against GLib itself
/// (python3-gi's `GLib.Variant.parse` and `print_`) over a corpus of what dconf dumps and what
/// people write by hand.
final class GVariantTextTests: XCTestCase {
    /// Texts as `dconf dump` prints them and as people write them for `dconf load`.
    static let corpus: [String] = [
        "true", "false", "42", "-7", "+5", "0x1F", "017", "3.5", "-0.25", "1e5", "2.5e-3", "inf", "-inf", "nan",
        "'hello'", "\"it's\"", "'tab\\there'", "'\\u00e9t\\u00e9'", "'\\U0001F600'", "'back\\\\slash'", "'quote\\''",
        "uint32 5", "int64 -9223372036854775808", "uint64 18446744073709551615", "byte 0xff", "int16 -32768", "uint16 65535",
        "double 1", "objectpath '/org/x'", "signature 'a{sv}'", "@u 7", "@t 0", "@d 3",
        "['a', 'b']", "@as []", "[1, 2, 3]", "[1, 2.5]", "[int64 1, 2]", "[uint32 1, 2]", "@ai []",
        "{'a': 1, 'b': 2}", "@a{ss} {}", "{'k': <1>, 'l': <'x'>}", "{1: 'one'}", "{'a': [1, 2]}",
        "(1, 'x')", "(1,)", "('a', (1, 2))", "[(1, 'a'), (2, 'b')]", "@a(ss) []", "[('xkb', 'us'), ('xkb', 'de')]",
        "<1>", "<'x'>", "<(1, 'x')>", "<@as []>", "<<true>>", "[<1>, <'a'>]",
        "@ms nothing", "@ms 'x'", "just 'x'", "@mi 5", "@mmi nothing", "@mmi just nothing", "@mmi 3", "[just 1, nothing]",
        "@mas ['a']", "@a{sv} {}", "{'m': <@ms nothing>}", "b'bytes'", "b\"it's\"", "b'\\001\\377'", "@ay []", "[byte 0x01, 0x02]",
        "[@ms 'a', nothing]", "{'x': <(uint32 2, <('Berlin', 'EDDT', true, [(0.91, 0.23)], @a(dd) [])>)>}",
        "[{'location': <(uint32 2, <('Paris', 'LFPB', false, @a(dd) [], @a(dd) [])>)>}]",
        "'Cantarell 11'", "'/usr/share/backgrounds/gnome/adwaita-l.jpg'", "['<Super>Tab', '<Alt>Tab']", "(640, 480)",
        "(true, 1.5, 'x')", "@(ii) (1, 2)", "{'a': {'b': 1}}",
    ]

    /// Texts both GLib and this reader refuse.
    static let invalid: [String] = ["", "[]", "{}", "nothing", "[1, 'a']", "(1)", "'unterminated", "@zz 1", "tru", "[1,]", "1 2", "uint32 -1", "byte 256", "{'a': 1, 'b': 'x'}"]

    func testTheCorpusReadsAndPrintsAsGLibDoes() throws {
        let glib = try Self.glib(Self.corpus)
        var printed: [String] = []
        for (text, expected) in zip(Self.corpus, glib) {
            do {
                let value = try GVariantText.parse(text)
                XCTAssertEqual(value.type.description, expected.type, "type of \(text)")
                printed.append(GVariantText.print(value))
            } catch {
                XCTFail("\(text): \(error) (GLib: \(expected))")
                printed.append(text)
            }
        }
        // What we print, GLib reads back as the same value.
        for ((text, expected), reread) in zip(zip(Self.corpus, glib), try Self.glib(printed)) {
            XCTAssertEqual(reread.printed, expected.printed, "\(text) printed as \(reread)")
            XCTAssertEqual(reread.type, expected.type, "\(text) printed as \(reread)")
        }
    }

    func testWhatGLibRefusesIsRefused() throws {
        let glib = try Self.glib(Self.invalid)
        for (text, answer) in zip(Self.invalid, glib) {
            XCTAssertEqual(answer.type, "error", "GLib reads \(text)")
            XCTAssertThrowsError(try GVariantText.parse(text), text)
        }
    }

    func testAGivenTypeReadsPlainValuesAsThatType() throws {
        XCTAssertEqual(GVariantText.print(try GVariantText.parse("5", as: .uint32)), "uint32 5")
        XCTAssertEqual(GVariantText.print(try GVariantText.parse("'x'", as: .maybe(.string))), "@ms 'x'")
        XCTAssertEqual(GVariantText.print(try GVariantText.parse("[]", as: .array(.string))), "@as []")
        XCTAssertEqual(GVariantText.print(try GVariantText.parse("(0, 0)", as: try GVariantType(parsing: "(dd)"))), "(0.0, 0.0)")
        XCTAssertThrowsError(try GVariantText.parse("'x'", as: .int32))
    }

    func testMaybeTypesTakeTheArrayOfOneFieldStructsFormAndComeBack() throws {
        let just = try GVariantText.parse("@ms 'x'")
        XCTAssertEqual(try just.dbusValue(), .array(of: .structure([.string]), [.structure([.string("x")])]))
        let nothing = try GVariantText.parse("@mai nothing")
        XCTAssertEqual(try nothing.dbusValue(), .array(of: .structure([.array(.int32)]), []))
        for text in ["@ms 'x'", "@mmi just nothing", "{'m': <@ms nothing>}", "[just 1, nothing]", "@a{sv} {}"] {
            let value = try GVariantText.parse(text)
            let back = try XCTUnwrap(GVariantValue(dbus: try value.dbusValue()))
            XCTAssertEqual(GVariantText.print(back), GVariantText.print(value), text)
        }
    }

    func testWhatDBusCannotHoldIsRefusedWithTheReason() throws {
        for (text, reason) in [("()", "empty tuple"), ("{'a', 1}", "dict entry"), ("handle 3", "handle"),
                               ("<[('a',)]>", "one-element tuples")] {
            let value = try GVariantText.parse(text)
            XCTAssertThrowsError(try value.dbusValue(), text) { error in
                XCTAssertTrue("\(error)".contains(reason), "\(text): \(error)")
            }
        }
        // Outside a variant a schema can say what a(s) is; dconf's text cannot.
        let singletons = try GVariantText.parse("[('a',)]")
        XCTAssertNoThrow(try singletons.dbusValue())
        XCTAssertThrowsError(try singletons.dbusValue(schemaless: true))
    }

    /// GLib's reading of each text: its type and `print_(True)`, or type "error".
    static func glib(_ texts: [String]) throws -> [(type: String, printed: String)] {
        let script = """
        import sys, json
        from gi.repository import GLib
        out = []
        for text in json.load(sys.stdin):
            try:
                v = GLib.Variant.parse(None, text, None, None)
                out.append([v.get_type_string(), v.print_(True)])
            except Exception:
                out.append(["error", ""])
        print(json.dumps(out))
        """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = ["-c", script]
        let input = Pipe(), output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        input.fileHandleForWriting.write(try JSONSerialization.data(withJSONObject: texts))
        try input.fileHandleForWriting.close()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let rows = try XCTUnwrap(try JSONSerialization.jsonObject(with: data) as? [[String]], String(decoding: data, as: UTF8.self))
        return rows.map { ($0[0], $0[1]) }
    }
}
