// swift-tools-version:6.2
import PackageDescription

/// How release builds of the two programs link (see the executable targets):
/// - `-static-stdlib`: the Swift runtime and Dispatch are linked in, not loaded and relocated;
/// - `linker/static-libstdc++` first on the search path: the runtime's C++ library is linked
///   in too (its dynamic symbol tables cost 1 MiB resident at start);
/// - lld with `-z pack-relative-relocs` (DT_RELR, glibc 2.36): the 27,000 relative relocations
///   take a few KiB instead of 640 KiB of `.rela.dyn` that every start pages in;
/// - `--no-export-dynamic` (after the runtime's `-export-dynamic`): the program's own symbols
///   stay out of the dynamic symbol table (180 KiB paged in at start; nothing looks them up).
let staticRuntimeInRelease: [LinkerSetting] = [.unsafeFlags([
    "-static-stdlib", "-L", Context.packageDirectory + "/linker/static-libstdc++",
    "-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs",
    "-Xlinker", "--no-export-dynamic",
], .when(configuration: .release))]

let package = Package(
    name: "PropBus",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "DBusValues", targets: ["DBusValues"]),
        .library(name: "DBus", targets: ["DBus"]),
        .library(name: "PropBus", targets: ["PropBus"]),
        .library(name: "Etcd", targets: ["Etcd"]),
        .library(name: "PropBusClient", targets: ["PropBusClient"]),
        .executable(name: "propbusd", targets: ["propbusd"]),
        .executable(name: "propctl", targets: ["propctl"]),
        // The GSettings backend GIO loads (GSETTINGS_BACKEND=propbus): libgiopropbus.so.
        .library(name: "giopropbus", type: .dynamic, targets: ["GIOPropBus"]),
    ],
    targets: [
        .systemLibrary(
            name: "CDBus",
            pkgConfig: "dbus-1",
            providers: [.apt(["libdbus-1-dev"])]
        ),
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        // Headers only: the Etcd target opens libcurl with dlopen (LibCurl.swift), so nothing links
        // it and propbusd without --fleet never maps it. Debian's multiarch include directory,
        // where curl/curl.h lives, is on the compiler's default path.
        .systemLibrary(
            name: "CCurl",
            providers: [.apt(["libcurl4-openssl-dev"])]
        ),
        // GIO, for the GSettings backend module only: nothing else links GLib.
        .systemLibrary(
            name: "CGio",
            pkgConfig: "gio-2.0",
            providers: [.apt(["libglib2.0-dev"])]
        ),
        // The GSettings backend (C against GIO): GSettings reads and writes keys of propbusd.
        // Linked as a plain C shared object in release builds (the package's), since GIO loads
        // it into every GSettings user: the Swift driver that links it finds
        // linker/c-module/linux/libswiftCore.so (an empty linker script) instead of the runtime,
        // adds no Swift start-up object and no toolchain RUNPATH. Debug builds (the tests, and
        // scripts/sanitize, whose ASan runtime the driver finds in its own resource directory)
        // keep the driver's defaults. Only GIO's three module entry points are exported.
        .target(
            name: "GIOPropBus", dependencies: ["CGio"],
            cSettings: [.unsafeFlags(["-fvisibility=hidden"])],
            linkerSettings: [.unsafeFlags(["-resource-dir", Context.packageDirectory + "/linker/c-module",
                                           "-no-toolchain-stdlib-rpath", "-nostartfiles"], .when(configuration: .release))]
        ),
        // dconf's and GSettings' formats for propctl import and export: GVariant types, values and
        // text, key files, schema XML, and paths as propbus keys. Pure Swift, no GLib.
        .target(name: "GSettingsFormats", dependencies: ["DBusValues"]),
        // Linux calls Swift cannot import directly (variadic prctl); header only, no library.
        .systemLibrary(name: "CLinux"),
        // Typed wrappers over the C library (files, environment, clock): what Foundation gave,
        // without linking it.
        .target(name: "SystemKit"),
        // The declarative command-line parser both programs use: specs, lexer, parser, help,
        // man page items and "did you mean". Pure Swift, nothing of propbus.
        .target(name: "CommandLineKit"),
        // The D-Bus value model, signatures and name validation: pure Swift, no libdbus.
        .target(name: "DBusValues"),
        // JSON values, exact (64-bit integers, member order), parsed and printed without
        // Foundation: the one codec of the core, the model files, propctl and the etcd client.
        .target(name: "JSON"),
        .target(name: "DBus", dependencies: ["DBusValues", "CDBus", "SystemKit"]),
        .target(name: "Etcd", dependencies: ["CCurl", "JSON"]),
        // The library for Swift programs that use the daemon: typed properties, channels to
        // @Observable models and commands. Only the D-Bus library: not the core, the store or curl.
        .target(name: "PropBusClient", dependencies: ["DBus", "DBusValues", "SystemKit"]),
        // The core model: no libdbus, no SQLite.
        .target(name: "PropBus", dependencies: ["DBusValues", "JSON"]),
        // The core's adapters to the system: the SQLite store, the state directory and the user
        // and group databases.
        .target(name: "PropBusSystem", dependencies: ["PropBus", "DBusValues", "CSQLite", "CLinux", "SystemKit"]),
        // Running commands' programs: one poll loop for every run, and what they leave behind.
        // No SQLite, so propctl (`serve`) can use it without linking the store.
        .target(name: "PropBusExec", dependencies: ["PropBus", "DBusValues", "CLinux", "SystemKit"]),
        // Model files: parsing, checking and applying them to the model (also propctl `codegen`'s).
        .target(name: "PropBusModelFiles", dependencies: ["PropBus", "DBusValues", "SystemKit"]),
        .target(name: "PropBusService", dependencies: ["DBus", "PropBus", "PropBusSystem", "PropBusExec", "PropBusModelFiles", "SystemKit"]),
        // The fleet (`--fleet`): fleet keys mirrored from etcd and their writes sent there first,
        // the service's write gate. The only target that speaks etcd besides the client itself.
        .target(name: "PropBusFleet", dependencies: ["PropBusService", "PropBus", "DBusValues", "PropBusSystem", "PropBusModelFiles", "DBus", "Etcd", "SystemKit"]),
        // Release builds link the Swift runtime statically: a program starts like a C
        // program instead of loading and relocating a dozen Swift libraries, and touches fewer
        // pages. Debug builds (the tests) keep the shared runtime.
        .executableTarget(
            name: "propbusd", dependencies: ["CommandLineKit", "DBus", "PropBus", "PropBusSystem", "PropBusExec", "PropBusModelFiles", "PropBusService", "PropBusFleet", "SystemKit"],
            linkerSettings: staticRuntimeInRelease
        ),
        .executableTarget(
            name: "propctl", dependencies: ["CommandLineKit", "DBus", "PropBus", "PropBusExec", "PropBusModelFiles", "SystemKit", "GSettingsFormats"],
            linkerSettings: staticRuntimeInRelease
        ),
        // The ReactiveCocoa MVVM introduction's Flickr search view model written with the client library; built with
        // everything else, run by ExampleTests against a daemon with examples/flickr-search.json.
        .executableTarget(name: "FlickrSearch", dependencies: ["PropBusClient"], path: "examples/FlickrSearch"),
        // bench/client-latency.sh's observer through PropBusClient's `values`.
        .executableTarget(name: "ClientLatencyProbe", dependencies: ["PropBusClient"], path: "bench/ClientLatencyProbe"),
        .testTarget(name: "SystemKitTests", dependencies: ["SystemKit"]),
        .testTarget(name: "JSONTests", dependencies: ["JSON"]),
        // Links libdbus only to compare the pure validators with libdbus's answers.
        .testTarget(name: "DBusValuesTests", dependencies: ["DBusValues", "CDBus"]),
        // A private dbus-daemon for the in-process test targets.
        .target(name: "BusTestSupport", dependencies: ["DBus"], path: "Tests/BusTestSupport"),
        .testTarget(name: "DBusTests", dependencies: ["DBus", "DBusValues", "CDBus", "BusTestSupport"]),
        .testTarget(name: "PropBusTests", dependencies: ["PropBus", "DBusValues"]),
        // The service in this process on a private bus, with stores in memory.
        // Stores for the in-process service tests (one that refuses commits on demand).
        .target(name: "StoreTestSupport", dependencies: ["PropBus"], path: "Tests/StoreTestSupport"),
        .testTarget(name: "PropBusServiceTests", dependencies: ["PropBusService", "PropBus", "DBus", "BusTestSupport", "StoreTestSupport"]),
        // The fleet in this process against a fake etcd port: its state machine, layout and the
        // service with the fleet as its gate.
        .testTarget(name: "PropBusFleetTests", dependencies: ["PropBusFleet", "PropBusService", "PropBus", "DBus", "Etcd", "BusTestSupport", "StoreTestSupport"]),
        .testTarget(name: "PropBusSystemTests", dependencies: ["PropBusSystem", "PropBusModelFiles", "PropBus", "DBusValues"]),
        .testTarget(name: "PropBusExecTests", dependencies: ["PropBusExec", "PropBus", "DBusValues"]),
        .testTarget(name: "CommandLineKitTests", dependencies: ["CommandLineKit"]),
        .testTarget(name: "GSettingsFormatsTests", dependencies: ["GSettingsFormats", "DBusValues"]),
        .testTarget(name: "PropctlTests", dependencies: ["propctl", "CommandLineKit", "PropBus", "PropBusModelFiles", "DBus"]),
        .testTarget(name: "PropbusdTests", dependencies: ["propbusd", "CommandLineKit", "PropBus"]),
        // Real etcd members on loopback, for EtcdTests and the fleet integration tests.
        .target(name: "EtcdTestSupport", dependencies: ["Etcd"], path: "Tests/EtcdTestSupport"),
        .testTarget(name: "EtcdTests", dependencies: ["Etcd", "EtcdTestSupport", "JSON"]),
        .testTarget(name: "IntegrationTests", dependencies: ["DBus", "PropBus", "PropBusClient", "PropBusSystem", "CSQLite", "Etcd", "EtcdTestSupport"]),
    ]
)
