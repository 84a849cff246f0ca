import DBusValues
import GSettingsFormats
import XCTest

/// dconf paths as propbus keys, key files, and schema files.
final class SettingsFilesTests: XCTestCase {
    func testPathsMapToKeysAndBack() {
        let cases: [(path: String, key: String)] = [
            ("/org/gnome/desktop/interface/font-name", "org.gnome.desktop.interface.font_name"),
            ("/com/gexperts/Tilix/quake-height-percent", "com.gexperts.Tilix.quake_height_percent"),
            ("/org/gnome/terminal/legacy/profiles:/:b1dcc9dd-5262/visible-name",
             "org.gnome.terminal.legacy._profiles_3a.__3ab1dcc9dd_2d5262.visible_name"),
            ("/a/b_c/d", "a._b_5fc.d"),
            ("/a/b--c/d", "a._b_2d_2dc.d"),
            ("/a/-b/d", "a.__2db.d"),
            ("/bindings/x/y", "_bindings.x.y"),
            ("/x/bindings/y", "x.bindings.y"),
            ("/a/3d-mode", "a._3d_2dmode"),
            ("/a/Reset", "a._Reset"),
            ("/a/\u{e9}t\u{e9}/x", "a.__c3_a9t_c3_a9.x"),
            ("/a/with.dot/x", "a._with_2edot.x"),
        ]
        for item in cases {
            XCTAssertEqual(SettingsPaths.key(forSettingsKey: item.path), item.key, item.path)
            XCTAssertEqual(SettingsPaths.settingsKey(forKey: item.key), item.path, item.key)
        }
        XCTAssertEqual(SettingsPaths.group(forSettingsDirectory: "/org/gnome/desktop/interface/"), "org.gnome.desktop.interface")
        for path in ["/x", "/a//b", "a/b", "/a/b/", "/" + String(repeating: "a/", count: 200) + "k"] {
            XCTAssertNil(SettingsPaths.key(forSettingsKey: path), path)
        }
        // Keys made otherwise than by the mapping have no path.
        for key in ["a.b__c.d", "a.b_.c", "a._B_5F.c", "a._abc.d", "settings"] {
            XCTAssertNil(SettingsPaths.settingsKey(forKey: key), key)
        }
        XCTAssertEqual(SettingsPaths.settingsKey(forKey: "settings.volume"), "/settings/volume")
    }

    func testKeyFilesReadAsGKeyFileReadsThem() throws {
        let text = """
        # a comment
        [org/gnome/desktop/interface]
        font-name='Cantarell 11'
          clock-format = '24h'
        font-name='Sans 10'

        [/]
        top=1
        [org/gnome/desktop/interface]
        gtk-theme='Adwaita'
        """
        let file = try KeyFile(parsing: text, source: "dump")
        XCTAssertEqual(file.groups.map(\.name), ["org/gnome/desktop/interface", "/"])
        XCTAssertEqual(file.groups[0].entries.map(\.key), ["font-name", "clock-format", "gtk-theme"])
        XCTAssertEqual(file.groups[0].entries.map(\.value), ["'Sans 10'", "'24h'", "'Adwaita'"])
        XCTAssertEqual(file.text, "[org/gnome/desktop/interface]\nfont-name='Sans 10'\nclock-format='24h'\ngtk-theme='Adwaita'\n\n[/]\ntop=1\n")
        XCTAssertThrowsError(try KeyFile(parsing: "key=1\n", source: "f")) { XCTAssertTrue("\($0)".contains("f:1:"), "\($0)") }
        XCTAssertThrowsError(try KeyFile(parsing: "[g]\nno equals\n", source: "f")) { XCTAssertTrue("\($0)".contains("f:2:"), "\($0)") }
    }

    static let schemaXML = """
    <?xml version="1.0" encoding="UTF-8"?>
    <!DOCTYPE schemalist SYSTEM "gschema.dtd">
    <schemalist gettext-domain="test">
      <!-- enums first -->
      <enum id="org.example.Colour"><value nick="red" value="0"/><value nick="green" value="1"/></enum>
      <flags id="org.example.Sides"><value nick="top" value="1"/><value nick="left" value="2"/></flags>
      <schema id="org.example.Derived" path="/org/example/derived/" extends="org.example.Base">
        <override name="size">42</override>
        <key name="extra" type="b"><default>false</default></key>
      </schema>
      <schema id="org.example.Base" path="/org/example/base/">
        <key name="size" type="u">
          <range min="1" max="100"/>
          <default>10</default>
          <summary>The size</summary>
          <description>
            How big it is,
            in units &amp; more.
          </description>
        </key>
        <key name="colour" enum="org.example.Colour"><default>'green'</default></key>
        <key name="sides" flags="org.example.Sides"><default>['top']</default></key>
        <key name="mode" type="s"><choices><choice value="a"/><choice value="b"/></choices><default>'a'</default></key>
        <key name="maybe" type="ms"><default l10n="messages">nothing</default></key>
      </schema>
      <schema id="org.example.Profile"><key name="name" type="s"><default>''</default></key></schema>
    </schemalist>
    """

    func testSchemasReadAsGlibCompileSchemasReadsThem() throws {
        var set = GSchemaSet()
        try set.add(Self.schemaXML, source: "org.example.gschema.xml")
        try set.resolve()
        XCTAssertEqual(set.schemas.map(\.id), ["org.example.Base", "org.example.Derived", "org.example.Profile"])
        let base = set.schemas[0]
        XCTAssertEqual(base.path, "/org/example/base/")
        XCTAssertEqual(base.keys.map(\.name), ["size", "colour", "sides", "mode", "maybe"])
        let size = base.keys[0]
        XCTAssertEqual(size.type, .uint32)
        XCTAssertEqual(try size.defaultValue.dbusValue(), .uint32(10))
        XCTAssertEqual(size.summary, "The size")
        XCTAssertEqual(size.description, "How big it is, in units & more.")
        XCTAssertEqual(try size.range.map { [try $0.minimum.dbusValue(), try $0.maximum.dbusValue()] }, [.uint32(1), .uint32(100)])
        XCTAssertEqual(base.keys[1].type, .string)
        XCTAssertEqual(base.keys[1].choices, ["red", "green"])
        XCTAssertEqual(base.keys[2].type, .array(.string))
        XCTAssertEqual(base.keys[3].choices, ["a", "b"])
        XCTAssertEqual(GVariantText.print(base.keys[4].defaultValue), "@ms nothing")
        let derived = set.schemas[1]
        XCTAssertEqual(derived.keys.map(\.name), ["size", "colour", "sides", "mode", "maybe", "extra"])
        XCTAssertEqual(try derived.keys[0].defaultValue.dbusValue(), .uint32(42))
        XCTAssertNil(set.schemas[2].path)

        var skipped: [String] = []
        let overrides = try set.overrides([(text: "[org.example.Base]\nsize=7\n[org.example.Base:GNOME]\nsize=8\n", source: "10.override"),
                                           (text: "[org.example.Base]\nmode='b'\n", source: "20.override")], skipped: &skipped)
        XCTAssertEqual(try overrides["org.example.Base"]?["size"]?.dbusValue(), .uint32(7))
        XCTAssertEqual(try overrides["org.example.Base"]?["mode"]?.dbusValue(), .string("b"))
        XCTAssertEqual(skipped.count, 1, "\(skipped)")
        XCTAssertThrowsError(try set.overrides([(text: "[org.example.Base]\nsize='x'\n", source: "bad.override")], skipped: &skipped)) {
            XCTAssertTrue("\($0)".contains("bad.override"), "\($0)")
        }
    }

    func testBrokenSchemaFilesAreRefusedWithFileAndLine() throws {
        var set = GSchemaSet()
        try set.add("<schemalist>\n<schema id='x' path='/x/'>\n<key name='k' type='i'><default>'a'</default></key></schema></schemalist>", source: "bad.xml")
        XCTAssertThrowsError(try set.resolve()) {
            XCTAssertTrue("\($0)".contains("bad.xml:3"), "\($0)")
        }
        XCTAssertThrowsError(try set.add("<schemalist><schema id='y'>", source: "cut.xml")) {
            XCTAssertTrue("\($0)".contains("cut.xml"), "\($0)")
        }
    }
}
