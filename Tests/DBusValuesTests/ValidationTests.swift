import CDBus
import DBusValues
import XCTest

/// The pure-Swift validators against libdbus's `dbus_validate_*`, which they replace.
///
/// This target links libdbus only to ask it; DBusValues itself does not. Each rule is checked on
/// hand-picked edge cases and on many generated names built from the bytes the rules turn on.
final class ValidationTests: XCTestCase {
    private let cases = [
        "", ".", "a", "a.", ".a", "a.b", "a..b", "a.b.", "org.freedesktop.DBus", "org.propbus.PropBus1.Error.UnknownKey",
        "_a._b", "a1.b2", "1a.b", "a.1b", "a-b.c", "-a.b", "a.-b", ":", ":1", ":1.", ":1.42", ":.1", ":1..2", ":a-b.c_d",
        ":1.2.3", "a.b:c", "Get", "get_all", "_", "1Get", "Get.All", "Get-All", "a b", "é.b", "a.é", "a/b", "a.b/c",
        String(repeating: "a", count: 255), String(repeating: "a", count: 256),
        "a." + String(repeating: "b", count: 253), "a." + String(repeating: "b", count: 254),
        ":1." + String(repeating: "2", count: 252), ":1." + String(repeating: "2", count: 253),
    ]

    /// Names generated from the bytes that matter to the rules, short enough to hit every shape.
    private var generated: [String] {
        let alphabet = Array("a_Z9-.:/é ")
        var generator = SplitMix(seed: 12)
        var names: [String] = []
        for _ in 0..<20_000 {
            let length = Int(generator.next() % 7)
            names.append(String((0..<length).map { _ in alphabet[Int(generator.next() % UInt64(alphabet.count))] }))
        }
        return names
    }

    func testInterfaceNamesAgreeWithLibdbus() {
        for name in cases + generated {
            XCTAssertEqual(Validation.isValidInterfaceName(name), dbus_validate_interface(name, nil) != 0, "'\(name)'")
        }
    }

    func testMemberNamesAgreeWithLibdbus() {
        for name in cases + generated {
            XCTAssertEqual(Validation.isValidMemberName(name), dbus_validate_member(name, nil) != 0, "'\(name)'")
        }
    }

    func testBusNamesAgreeWithLibdbus() {
        for name in cases + generated {
            XCTAssertEqual(Validation.isValidBusName(name), dbus_validate_bus_name(name, nil) != 0, "'\(name)'")
        }
    }

    func testErrorNamesAgreeWithLibdbus() {
        for name in cases + generated {
            XCTAssertEqual(Validation.isValidErrorName(name), dbus_validate_error_name(name, nil) != 0, "'\(name)'")
        }
    }

    func testObjectPathsAgreeWithLibdbus() {
        let paths = ["", "/", "//", "/a", "/a/", "/a//b", "/a/b_1", "a/b", "/a-b", "/é", "/a/b/c/D9_"]
        var generator = SplitMix(seed: 7)
        let alphabet = Array("/a_9-.é")
        let generatedPaths = (0..<5_000).map { _ in
            String((0..<Int(generator.next() % 6)).map { _ in alphabet[Int(generator.next() % UInt64(alphabet.count))] })
        }
        for path in paths + generatedPaths {
            XCTAssertEqual(ObjectPath.isValid(path), dbus_validate_path(path, nil) != 0, "'\(path)'")
        }
    }

    /// A NUL byte would cut the C string short, so libdbus can't be asked; the spec forbids it.
    func testNamesWithANulByteAreInvalid() {
        XCTAssertFalse(Validation.isValidInterfaceName("org.a\0b"))
        XCTAssertFalse(Validation.isValidMemberName("Get\0"))
        XCTAssertFalse(Validation.isValidBusName("org.a\0.b"))
        XCTAssertThrowsError(try Validation.check(busName: "org.propbus.PropBus1\0junk"))
    }

    func testUTF8AgreesWithLibdbus() {
        var samples: [[UInt8]] = [
            [], Array("propbus".utf8), Array("é€😀".utf8), [0x00], [0x61, 0x00, 0x62],
            [0xC0, 0x80], [0xC1, 0xBF], [0xE0, 0x80, 0x80], [0xF0, 0x80, 0x80, 0x80], // overlong
            [0xED, 0xA0, 0x80], [0xED, 0xBF, 0xBF], // surrogates
            [0xF4, 0x8F, 0xBF, 0xBF], [0xF4, 0x90, 0x80, 0x80], [0xF5, 0x80, 0x80, 0x80], // around U+10FFFF
            [0xEF, 0xBF, 0xBE], [0xEF, 0xBF, 0xBF], [0xEF, 0xB7, 0x90], // noncharacters
            [0x80], [0xC3], [0xE2, 0x82], [0xFF], [0xFE],
        ]
        var generator = SplitMix(seed: 3)
        let interesting: [UInt8] = [0x00, 0x41, 0x7F, 0x80, 0xBF, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF, 0xA0, 0x90]
        for _ in 0..<20_000 {
            samples.append((0..<Int(generator.next() % 5)).map { _ in interesting[Int(generator.next() % UInt64(interesting.count))] })
        }
        for bytes in samples {
            let libdbus = bytes.withUnsafeBufferPointer { buffer in
                // dbus_validate_utf8 takes a C string: what it sees ends at the first NUL.
                let prefix = Array(buffer.prefix { $0 != 0 }) + [0]
                return prefix.withUnsafeBufferPointer { dbus_validate_utf8(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), nil) != 0 }
            }
            if bytes.contains(0) {
                XCTAssertFalse(Validation.isValidUTF8(bytes), "\(bytes)")
            } else {
                XCTAssertEqual(Validation.isValidUTF8(bytes), libdbus, "\(bytes)")
            }
        }
    }
}

/// A small deterministic generator, so a failure names the same inputs on every run.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
