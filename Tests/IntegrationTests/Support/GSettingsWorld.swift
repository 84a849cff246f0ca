import Foundation

/// GSettings pointed at propbus, as an unchanged application would run: a compiled test schema,
/// `GSETTINGS_BACKEND=propbus` and `GIO_EXTRA_MODULES` at the directory where the build left
/// `libgiopropbus.so` (next to propbusd), on the test's private bus.
struct GSettingsWorld: Sendable {
    /// The schema every GSettings test uses, at `/org/propbus/gstest/`.
    static let schemaID = "org.propbus.gstest"

    let schemaDirectory: URL
    let environment: [String: String]

    /// The test schemas: one of most GVariant types (maybe types, an enum and flags among
    /// them), a child, and a relocatable one.
    static let schemaXML = """
    <schemalist>
      <enum id="org.propbus.gstest.colour">
        <value nick="red" value="0"/><value nick="green" value="1"/><value nick="blue" value="2"/>
      </enum>
      <flags id="org.propbus.gstest.sides">
        <value nick="top" value="1"/><value nick="bottom" value="2"/><value nick="left" value="4"/>
      </flags>
      <schema id="org.propbus.gstest" path="/org/propbus/gstest/">
        <key name="font-name" type="s"><default>'Cantarell 11'</default><summary>The interface font</summary></key>
        <key name="greeting" type="s"><default>'Hello, earthlings'</default></key>
        <key name="farewell" type="s"><default>'So long'</default></key>
        <key name="count" type="i"><range min="0" max="100"/><default>3</default></key>
        <key name="enabled" type="b"><default>true</default></key>
        <key name="ratio" type="d"><default>1.5</default></key>
        <key name="tiny" type="y"><default>0</default></key>
        <key name="small" type="n"><default>0</default></key>
        <key name="word" type="q"><default>0</default></key>
        <key name="unsigned" type="u"><default>0</default></key>
        <key name="big" type="x"><default>0</default></key>
        <key name="huge" type="t"><default>0</default></key>
        <key name="object" type="o"><default>'/'</default></key>
        <key name="tags" type="as"><default>['a']</default></key>
        <key name="window-size" type="(ii)"><default>(640, 480)</default></key>
        <key name="nested" type="(s(ii))"><default>('none', (0, 0))</default></key>
        <key name="table" type="a{sau}"><default>{}</default></key>
        <key name="options" type="a{sv}"><default>{}</default></key>
        <key name="maybe-name" type="ms"><default>nothing</default></key>
        <key name="maybe-list" type="mai"><default>nothing</default></key>
        <key name="colour" enum="org.propbus.gstest.colour"><default>'red'</default></key>
        <key name="sides" flags="org.propbus.gstest.sides"><default>['top']</default></key>
        <child name="child" schema="org.propbus.gstest.child"/>
      </schema>
      <schema id="org.propbus.gstest.child" path="/org/propbus/gstest/child/">
        <key name="depth" type="i"><default>0</default></key>
      </schema>
      <schema id="org.propbus.gstest.other" path="/org/propbus/gstest-other/">
        <key name="label" type="s"><default>'other'</default></key>
      </schema>
      <schema id="org.propbus.gstest.profile">
        <key name="visible-name" type="s"><default>'Unnamed'</default></key>
      </schema>
    </schemalist>
    """

    /// Compiles the schemas into a directory of `base` and builds the environment from
    /// `busEnvironment` (the private bus as the session bus).
    static func make(in base: URL, busEnvironment: [String: String]) async throws -> GSettingsWorld {
        let directory = base.appendingPathComponent("schemas")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try schemaXML.write(to: directory.appendingPathComponent("org.propbus.gstest.gschema.xml"), atomically: true, encoding: .utf8)
        let compiled = try await runCommand("glib-compile-schemas", [directory.path], environment: busEnvironment, timeout: 30)
        guard compiled.succeeded else { throw TestSetupError("glib-compile-schemas failed: \(compiled)") }
        var environment = busEnvironment
        environment["GIO_EXTRA_MODULES"] = BuildProducts.directory.path
        environment["GSETTINGS_BACKEND"] = "propbus"
        environment["GSETTINGS_SCHEMA_DIR"] = directory.path
        // GIO's own modules directory holds dconf's module; only the extra one is wanted.
        environment["GIO_MODULE_DIR"] = base.appendingPathComponent("no-gio-modules").path
        // scripts/sanitize builds the module with AddressSanitizer; gsettings and python3, which
        // load it, are not: its runtime is preloaded into them, reporting memory errors (their
        // exit-time memory is GLib's and Python's, so leaks are not checked there).
        if let runtime = environment["PROPBUS_ASAN_RUNTIME"], !runtime.isEmpty, let options = environment["ASAN_OPTIONS"] {
            environment["LD_PRELOAD"] = runtime
            environment["ASAN_OPTIONS"] = options.replacingOccurrences(of: "detect_leaks=1", with: "detect_leaks=0")
        }
        return GSettingsWorld(schemaDirectory: directory, environment: environment)
    }

    /// `gsettings ARGS…` as a user runs it.
    func gsettings(_ arguments: [String], timeout: TimeInterval = 30) async throws -> CommandResult {
        try await runCommand("gsettings", arguments, environment: environment, timeout: timeout)
    }

    /// `/usr/bin/python3 -c SCRIPT ARGS…` with GIO from python3-gi, in this environment.
    func python(_ script: String, _ arguments: [String] = [], timeout: TimeInterval = 60) async throws -> CommandResult {
        try await runCommand("/usr/bin/python3", ["-c", script] + arguments, environment: environment, timeout: timeout)
    }

    /// A long-running python3 child (a monitor, a subscriber), read while it runs.
    func startPython(_ script: String, _ arguments: [String] = []) throws -> ChildProcess {
        try ChildProcess("/usr/bin/python3", ["-c", script] + arguments, environment: environment)
    }
}
