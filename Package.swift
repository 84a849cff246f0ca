// swift-tools-version:6.0
import PackageDescription

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
        .target(name: "DBus", dependencies: ["CDBus"]),
        .target(name: "Etcd", dependencies: ["CCurl"]),
        .target(name: "PropBus", dependencies: ["DBus", "CSQLite"]),
        .target(name: "PropBusService", dependencies: ["DBus", "PropBus"]),
        // Release builds link the Swift runtime statically (issue 13): the daemon starts like a C
        // program instead of loading and relocating a dozen Swift libraries, and its resident
        // size drops by about 3.5 MiB. Debug builds (the tests) keep the shared runtime. propctl
        // stays dynamic until it drops Foundation: statically it would carry ICU (76 MB).
        .executableTarget(
            name: "propbusd", dependencies: ["DBus", "PropBus", "PropBusService"],
            linkerSettings: [.unsafeFlags(["-static-stdlib", "-l_FoundationCollections", "-l_FoundationCShims"], .when(configuration: .release))]
        ),
        .executableTarget(name: "propctl", dependencies: ["DBus", "PropBus"]),
        .testTarget(name: "DBusTests", dependencies: ["DBus", "CDBus"]),
        .testTarget(name: "PropBusTests", dependencies: ["PropBus", "DBus"]),
        .testTarget(name: "PropctlTests", dependencies: ["propctl", "PropBus", "DBus"]),
        .testTarget(name: "EtcdTests", dependencies: ["Etcd"]),
        .testTarget(name: "IntegrationTests", dependencies: ["DBus", "PropBus", "CSQLite"]),
    ]
)
