// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "PropBus",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "DBus", targets: ["DBus"]),
        .library(name: "PropBus", targets: ["PropBus"]),
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
        // Linux calls Swift cannot import directly (variadic prctl); header only, no library.
        .systemLibrary(name: "CLinux"),
        .target(name: "DBus", dependencies: ["CDBus"]),
        .target(name: "PropBus", dependencies: ["DBus", "CSQLite", "CLinux"]),
        .target(name: "PropBusService", dependencies: ["DBus", "PropBus"]),
        .executableTarget(name: "propbusd", dependencies: ["DBus", "PropBus", "PropBusService"]),
        .executableTarget(name: "propctl", dependencies: ["DBus", "PropBus"]),
        .testTarget(name: "DBusTests", dependencies: ["DBus", "CDBus"]),
        .testTarget(name: "PropBusTests", dependencies: ["PropBus", "DBus"]),
        .testTarget(name: "PropctlTests", dependencies: ["propctl", "PropBus", "DBus"]),
        .testTarget(name: "IntegrationTests", dependencies: ["DBus", "PropBus", "CSQLite"]),
    ]
)
