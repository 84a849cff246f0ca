// swift-tools-version:6.0
import PackageDescription

/// `-static-stdlib` for release links only (see the executable targets).
let staticRuntimeInRelease: [LinkerSetting] = [.unsafeFlags(["-static-stdlib"], .when(configuration: .release))]

let package = Package(
    name: "PropBus",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "DBus", targets: ["DBus"]),
        .library(name: "PropBus", targets: ["PropBus"]),
        .library(name: "Etcd", targets: ["Etcd"]),
        .executable(name: "propbusd", targets: ["propbusd"]),
        .executable(name: "propctl", targets: ["propctl"]),
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
        .systemLibrary(
            name: "CCurl",
            pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]
        ),
        // Linux calls Swift cannot import directly (variadic prctl); header only, no library.
        .systemLibrary(name: "CLinux"),
        // Typed wrappers over the C library (files, environment, clock): what Foundation gave,
        // without linking it.
        .target(name: "SystemKit"),
        .target(name: "DBus", dependencies: ["CDBus", "SystemKit"]),
        .target(name: "Etcd", dependencies: ["CCurl"]),
        .target(name: "PropBus", dependencies: ["DBus", "CSQLite", "CLinux", "SystemKit"]),
        .target(name: "PropBusService", dependencies: ["DBus", "PropBus"]),
        // Release builds link the Swift runtime statically (issue 13): a program starts like a C
        // program instead of loading and relocating a dozen Swift libraries, and touches fewer
        // pages. Debug builds (the tests) keep the shared runtime.
        .executableTarget(
            name: "propbusd", dependencies: ["DBus", "PropBus", "PropBusService", "SystemKit"],
            linkerSettings: staticRuntimeInRelease
        ),
        .executableTarget(
            name: "propctl", dependencies: ["DBus", "PropBus", "SystemKit"],
            linkerSettings: staticRuntimeInRelease
        ),
        .testTarget(name: "SystemKitTests", dependencies: ["SystemKit"]),
        .testTarget(name: "DBusTests", dependencies: ["DBus", "CDBus"]),
        .testTarget(name: "PropBusTests", dependencies: ["PropBus", "DBus"]),
        .testTarget(name: "PropctlTests", dependencies: ["propctl", "PropBus", "DBus"]),
        .testTarget(name: "EtcdTests", dependencies: ["Etcd"]),
        .testTarget(name: "IntegrationTests", dependencies: ["DBus", "PropBus", "CSQLite"]),
    ]
)
