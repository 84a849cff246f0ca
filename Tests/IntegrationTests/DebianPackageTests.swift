import DBus
import Foundation
import XCTest

/// `scripts/package` as an administrator uses it: the .deb it builds (contents, control fields,
/// what lintian says) and its maintainer scripts (what they run, what remove and purge keep).
final class DebianPackageTests: XCTestCase {
    /// The repository root (Tests/IntegrationTests/DebianPackageTests.swift is two levels down).
    private static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    private func tool(_ name: String) -> String? {
        ["/usr/bin/", "/usr/sbin/", "/bin/"].map { $0 + name }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// `scripts/package` with this build's binaries, the .deb in `directory`; returns its path.
    private func buildPackage(into directory: URL) async throws -> String {
        var environment = ProcessInfo.processInfo.environment
        // Debug binaries keep the test fast; scripts/package itself builds release.
        environment["PROPBUS_BUILD_DIR"] = BuildProducts.directory.path
        environment["OUTDIR"] = directory.path
        let built = try await runCommand(Self.packageRoot.appendingPathComponent("scripts/package").path, [],
                                         environment: environment, timeout: 300)
        XCTAssertEqual(built.status, 0, "\(built)")
        let deb = built.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertTrue(FileManager.default.fileExists(atPath: deb), "\(built)")
        return deb
    }

    func testPackageHoldsTheInstallTreeWithComputedDependsAndLintianFindsNoError() async throws {
        guard let dpkgDeb = tool("dpkg-deb"), tool("dpkg-shlibdeps") != nil, tool("fakeroot") != nil else {
            throw XCTSkip("dpkg-dev or fakeroot is not installed (scripts/setup installs them)")
        }
        let directory = try makeTemporaryDirectory(prefix: "pbit-deb")
        defer { try? FileManager.default.removeItem(at: directory) }
        let deb = try await buildPackage(into: directory)
        XCTAssertTrue(deb.hasPrefix(directory.path + "/propbus_") && deb.hasSuffix("_amd64.deb"), deb)

        // Control fields.
        let control = try await runCommand(dpkgDeb, ["--field", deb], environment: [:])
        XCTAssertEqual(control.status, 0, "\(control)")
        var fields: [String: String] = [:]
        for line in control.stdout.split(separator: "\n") where !line.hasPrefix(" ") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            fields[String(line[..<colon])] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        XCTAssertEqual(fields["Package"], "propbus")
        XCTAssertEqual(fields["Architecture"], "amd64")
        let version = try await runCommand(BuildProducts.propbusd, ["--version"], environment: [:])
        XCTAssertTrue(version.stdout.contains(fields["Version"] ?? "?"), "Version \(fields["Version"] ?? "none") vs \(version.stdout)")
        let depends = fields["Depends"] ?? ""
        // From dpkg-shlibdeps: the libraries the binaries link, with versions.
        for library in ["libc6 (>= ", "libdbus-1-3 (>= ", "libsqlite3-0 (>= "] {
            XCTAssertTrue(depends.contains(library), "Depends lacks \(library): \(depends)")
        }
        XCTAssertTrue(depends.contains("dbus-system-bus | dbus"), depends)
        XCTAssertFalse(depends.contains("curl"), "libcurl is loaded only by --fleet: \(depends)")
        let recommends = fields["Recommends"] ?? ""
        XCTAssertTrue(recommends.hasPrefix("libcurl4, libglib2.0-0 (>= "), "libcurl for --fleet, GLib for the GSettings module: \(recommends)")
        XCTAssertFalse(depends.contains("libglib"), "only GSettings users load the module: \(depends)")
        XCTAssertNotNil(Int(fields["Installed-Size"] ?? ""), "\(fields)")

        // Contents: the tree PREFIX=/usr scripts/install stages, owned by root.
        let listing = try await runCommand(dpkgDeb, ["--contents", deb], environment: [:])
        XCTAssertEqual(listing.status, 0, "\(listing)")
        var entries: [String: (mode: String, owner: String)] = [:]
        for line in listing.stdout.split(separator: "\n") {
            let columns = line.split(separator: " ", omittingEmptySubsequences: true)
            guard columns.count >= 6, let path = columns.last else { continue }
            entries[String(path.dropFirst())] = (String(columns[0]), String(columns[1]))
        }
        let expected: [(String, String)] = [
            ("/usr/bin/propbusd", "-rwxr-xr-x"),
            ("/usr/bin/propctl", "-rwxr-xr-x"),
            ("/usr/lib/systemd/system/propbusd.service", "-rw-r--r--"),
            ("/usr/lib/systemd/user/propbusd.service", "-rw-r--r--"),
            ("/usr/lib/sysusers.d/propbus.conf", "-rw-r--r--"),
            ("/usr/lib/tmpfiles.d/propbus.conf", "-rw-r--r--"),
            ("/usr/share/dbus-1/system.d/org.propbus.PropBus1.conf", "-rw-r--r--"),
            ("/usr/share/dbus-1/system-services/org.propbus.PropBus1.service", "-rw-r--r--"),
            ("/usr/share/dbus-1/services/org.propbus.PropBus1.service", "-rw-r--r--"),
            ("/usr/share/man/man1/propctl.1.gz", "-rw-r--r--"),
            ("/usr/share/man/man8/propbusd.8.gz", "-rw-r--r--"),
            ("/usr/share/bash-completion/completions/propctl", "-rw-r--r--"),
            ("/usr/share/zsh/vendor-completions/_propctl", "-rw-r--r--"),
            ("/usr/share/fish/vendor_completions.d/propctl.fish", "-rw-r--r--"),
            ("/usr/share/doc/propbus/README.md", "-rw-r--r--"),
            ("/usr/share/doc/propbus/docs/install.md", "-rw-r--r--"),
            ("/usr/share/doc/propbus/copyright", "-rw-r--r--"),
            ("/usr/share/doc/propbus/changelog.gz", "-rw-r--r--"),
            ("/usr/share/propbus/examples/flickr-search.json", "-rw-r--r--"),
            ("/usr/share/propbus/examples/flickr-search.sh", "-rwxr-xr-x"),
            ("/usr/lib/x86_64-linux-gnu/gio/modules/libgiopropbus.so", "-rw-r--r--"),
        ]
        for (path, mode) in expected {
            XCTAssertEqual(entries[path]?.mode, mode, "\(path)\n\(listing.stdout)")
            XCTAssertEqual(entries[path]?.owner, "root/root", path)
        }
        XCTAssertFalse(entries.keys.contains { $0.hasPrefix("/etc/") || $0.hasPrefix("/var/") || $0.hasPrefix("/usr/local/") },
                       "the store and /etc are made by the maintainer scripts, not shipped\n\(listing.stdout)")

        // The units name the installed paths, the binaries are stripped and run.
        let unpacked = directory.appendingPathComponent("unpacked").path
        let extract = try await runCommand(dpkgDeb, ["-x", deb, unpacked], environment: [:])
        XCTAssertEqual(extract.status, 0, "\(extract)")
        let unit = try String(contentsOfFile: unpacked + "/usr/lib/systemd/system/propbusd.service", encoding: .utf8)
        XCTAssertTrue(unit.contains("\nExecStart=/usr/bin/propbusd --system\n"), unit)
        XCTAssertTrue(FileManager.default.fileExists(atPath: unpacked + "/usr/share/doc/propbus/docs/install.md"),
                      "the units' Documentation= names a file the package holds")
        XCTAssertTrue(unit.contains("file:///usr/share/doc/propbus/docs/install.md"), unit)
        for binary in ["bin/propbusd", "bin/propctl", "lib/x86_64-linux-gnu/gio/modules/libgiopropbus.so"] {
            let dynamic = try await runCommand("/usr/bin/readelf", ["-d", "-S", unpacked + "/usr/" + binary], environment: [:])
            XCTAssertEqual(dynamic.status, 0, "\(dynamic)")
            XCTAssertFalse(dynamic.stdout.contains("RUNPATH") || dynamic.stdout.contains("(RPATH)"),
                           "\(binary) names the build machine's toolchain")
            XCTAssertFalse(dynamic.stdout.contains(".symtab"), "\(binary) is not stripped")
        }
        // The installed docs' relative links name installed files (README.md's docs/*.md, the
        // docs' links to each other), and the script docs/commands.md runs is there.
        let docs = unpacked + "/usr/share/doc/propbus"
        for page in ["README.md"] + (try FileManager.default.contentsOfDirectory(atPath: docs + "/docs")).map({ "docs/" + $0 }) {
            let text = try String(contentsOfFile: docs + "/" + page, encoding: .utf8)
            let folder = (page as NSString).deletingLastPathComponent
            for link in markdownLinks(text) where !link.contains("://") {
                let target = ((docs + "/" + folder) as NSString).appendingPathComponent(link)
                XCTAssertTrue(FileManager.default.fileExists(atPath: target), "\(page) links to \(link), not installed")
            }
        }
        let commands = try String(contentsOfFile: docs + "/docs/commands.md", encoding: .utf8)
        XCTAssertTrue(commands.contains("/usr/share/propbus/examples/flickr-search.sh"), "docs/commands.md's first example")
        XCTAssertTrue(FileManager.default.isExecutableFile(atPath: unpacked + "/usr/share/propbus/examples/flickr-search.sh"))
        for script in ["postinst", "prerm", "postrm"] {
            let info = try await runCommand(dpkgDeb, ["--info", deb, script], environment: [:])
            XCTAssertEqual(info.status, 0, "\(script) is not in the control archive: \(info)")
        }

        // The licence, in Debian's machine-readable copyright format (lintian checks the format).
        let copyright = try String(contentsOfFile: unpacked + "/usr/share/doc/propbus/copyright", encoding: .utf8)
        XCTAssertTrue(copyright.hasPrefix("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"), copyright)
        XCTAssertTrue(copyright.contains("\nFiles: *\n") && copyright.contains("\nLicense: Apache-2.0\n"), copyright)
        XCTAssertTrue(copyright.contains("/usr/share/common-licenses/Apache-2.0"), copyright)
        XCTAssertFalse(copyright.lowercased().contains("unspecified"), copyright)
        let readme = try String(contentsOfFile: unpacked + "/usr/share/doc/propbus/README.md", encoding: .utf8)
        XCTAssertTrue(readme.contains("Apache License, Version 2.0"), "the README names the licence")

        // lintian: no errors (warnings are reported, not failed on).
        guard let lintian = tool("lintian") else { throw XCTSkip("lintian is not installed (scripts/setup installs it)") }
        let lint = try await runCommand(lintian, ["--fail-on", "none", "--tag-display-limit", "0", deb],
                                        environment: ["PATH": "/usr/bin:/bin:/usr/sbin:/sbin"], timeout: 300)
        XCTAssertEqual(lint.status, 0, "lintian did not run: \(lint)")
        let errors = lint.stdout.split(separator: "\n").filter { $0.hasPrefix("E:") }
        XCTAssertEqual(errors, [], "lintian:\n\(lint.stdout)\(lint.stderr)")
    }

    /// The targets of a Markdown text's `[text](target)` links, without their `#fragment`.
    private func markdownLinks(_ text: String) -> [String] {
        var links: [String] = []
        var rest = Substring(text)
        while let open = rest.range(of: "](") {
            rest = rest[open.upperBound...]
            guard let close = rest.firstIndex(of: ")") else { break }
            let target = rest[..<close].split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
            if !target.isEmpty { links.append(target) }
            rest = rest[close...]
        }
        return links
    }

    /// The maintainer scripts from packaging/debian, run as dpkg runs them, with stand-ins for
    /// the tools that would change this machine. With `systemdRunning`, in a mount namespace of
    /// its own whose /run has `systemd/system` (what scripts test for a running systemd),
    /// whether or not systemd runs here.
    private func runMaintainerScript(_ name: String, _ arguments: String..., root: String?, systemdRunning: Bool = false,
                                     in directory: URL) async throws -> (CommandResult, calls: [String]) {
        let fakes = directory.appendingPathComponent("fake-bin")
        try FileManager.default.createDirectory(at: fakes, withIntermediateDirectories: true)
        let log = directory.appendingPathComponent("calls")
        for tool in ["systemd-sysusers", "systemd-tmpfiles", "systemctl", "dbus-send", "deb-systemd-invoke", "deb-systemd-helper",
                     "invoke-rc.d"] {
            let path = fakes.appendingPathComponent(tool).path
            try "#!/bin/sh\necho \"\(tool) $*\" >> '\(log.path)'\n".write(toFile: path, atomically: true, encoding: .utf8)
            chmod(path, 0o755)
        }
        try? FileManager.default.removeItem(at: log)
        var environment = ["PATH": fakes.path + ":/usr/bin:/bin:/usr/sbin:/sbin"]
        environment["DPKG_ROOT"] = root
        let script = Self.packageRoot.appendingPathComponent("packaging/debian/\(name)").path
        let result: CommandResult
        if systemdRunning {
            guard getuid() == 0, let unshare = tool("unshare") else { throw XCTSkip("needs root and unshare, to fake a running systemd") }
            let inside = #"mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/system && exec "$@""#
            result = try await runCommand(unshare, ["--mount", "--propagation", "private", "--", "/bin/sh", "-c", inside, "sh", script] + arguments,
                                          environment: environment)
        } else {
            result = try await runCommand(script, arguments, environment: environment)
        }
        let calls = ((try? String(contentsOf: log, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        return (result, calls)
    }

    func testPostinstCreatesTheUserAndDirectoriesAndStartsNothing() async throws {
        let directory = try makeTemporaryDirectory(prefix: "pbit-deb")
        defer { try? FileManager.default.removeItem(at: directory) }
        let (result, calls) = try await runMaintainerScript("postinst", "configure", root: nil, in: directory)
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertEqual(Array(calls.prefix(2)), ["systemd-sysusers propbus.conf", "systemd-tmpfiles --create propbus.conf"], "\(calls)")
        // The links an enable would make are remembered for purge, as debhelper does.
        let helper = ["deb-systemd-helper unmask propbusd.service", "deb-systemd-helper update-state propbusd.service",
                      "deb-systemd-helper --user update-state propbusd.service"]
        XCTAssertEqual(Array(calls.dropFirst(2).prefix(3)), helper, "\(calls)")
        for call in calls.dropFirst(5) {
            XCTAssertTrue(call == "systemctl --system daemon-reload" || call.hasPrefix("dbus-send --system") && call.hasSuffix("ReloadConfig"),
                          "postinst ran \(call)")
        }
        XCTAssertFalse(calls.contains { $0.contains(" start") || $0.contains("enable") || $0.contains("restart") }, "\(calls)")

        // An upgrade restarts a daemon that runs (try-restart starts none), where systemd runs;
        // a first install does not.
        let (installed, installCalls) = try await runMaintainerScript("postinst", "configure", root: nil, systemdRunning: true, in: directory)
        XCTAssertEqual(installed.status, 0, "\(installed)")
        XCTAssertFalse(installCalls.contains { $0.hasPrefix("deb-systemd-invoke") }, "\(installCalls)")
        let (upgraded, upgradeCalls) = try await runMaintainerScript("postinst", "configure", "0.0.9", root: nil, systemdRunning: true, in: directory)
        XCTAssertEqual(upgraded.status, 0, "\(upgraded)")
        XCTAssertTrue(upgradeCalls.contains("deb-systemd-invoke try-restart propbusd.service"), "\(upgradeCalls)")

        // Into another root (DPKG_ROOT), the tools are told so and nothing reloads.
        let (rooted, rootedCalls) = try await runMaintainerScript("postinst", "configure", root: directory.path + "/root", in: directory)
        XCTAssertEqual(rooted.status, 0, "\(rooted)")
        XCTAssertEqual(rootedCalls, ["systemd-sysusers --root=\(directory.path)/root propbus.conf",
                                     "systemd-tmpfiles --root=\(directory.path)/root --create propbus.conf"] + helper)
    }

    func testPrermStopsTheSystemDaemonOnRemoveOnly() async throws {
        let directory = try makeTemporaryDirectory(prefix: "pbit-deb")
        defer { try? FileManager.default.removeItem(at: directory) }
        let (removed, calls) = try await runMaintainerScript("prerm", "remove", root: nil, systemdRunning: true, in: directory)
        XCTAssertEqual(removed.status, 0, "\(removed)")
        XCTAssertEqual(calls, ["deb-systemd-invoke stop propbusd.service"])
        for argument in ["upgrade", "deconfigure", "failed-upgrade"] {
            let (result, other) = try await runMaintainerScript("prerm", argument, root: nil, systemdRunning: true, in: directory)
            XCTAssertEqual(result.status, 0, "\(result)")
            XCTAssertEqual(other, [], "prerm \(argument) stops nothing: an upgrade's postinst restarts it")
        }
        let (rooted, rootedCalls) = try await runMaintainerScript("prerm", "remove", root: directory.path + "/root", in: directory)
        XCTAssertEqual(rooted.status, 0, "\(rooted)")
        XCTAssertEqual(rootedCalls, [], "nothing runs in another root")
    }

    func testRemoveKeepsTheStoreAndPurgeDeletesIt() async throws {
        let directory = try makeTemporaryDirectory(prefix: "pbit-deb")
        defer { try? FileManager.default.removeItem(at: directory) }
        let root = directory.appendingPathComponent("root").path
        let store = root + "/var/lib/propbus"
        try FileManager.default.createDirectory(atPath: store, withIntermediateDirectories: true)
        try "keys".write(toFile: store + "/store.sqlite", atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: root + "/etc/propbus/models", withIntermediateDirectories: true)
        try "{}".write(toFile: root + "/etc/propbus/models/mine.json", atomically: true, encoding: .utf8)

        let (removed, _) = try await runMaintainerScript("postrm", "remove", root: root, in: directory)
        XCTAssertEqual(removed.status, 0, "\(removed)")
        XCTAssertTrue(FileManager.default.fileExists(atPath: store + "/store.sqlite"), "remove deleted the store")

        // propctl lock's file (propbusd writes it).
        try FileManager.default.createDirectory(atPath: root + "/etc/propbus/mandatory.d", withIntermediateDirectories: true)
        try #"{"app.volume": 20}"#.write(toFile: root + "/etc/propbus/mandatory.d/50-propctl.json", atomically: true, encoding: .utf8)
        let (purged, calls) = try await runMaintainerScript("postrm", "purge", root: root, in: directory)
        XCTAssertEqual(purged.status, 0, "\(purged)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: store), "purge kept the store")
        XCTAssertTrue(FileManager.default.fileExists(atPath: root + "/etc/propbus/models/mine.json"),
                      "purge deleted an administrator's model file")
        XCTAssertFalse(FileManager.default.fileExists(atPath: root + "/etc/propbus/mandatory.d"), "propctl lock's file and its directory go")
        XCTAssertTrue(calls.contains("deb-systemd-helper purge propbusd.service") && calls.contains("deb-systemd-helper --user purge propbusd.service"),
                      "\(calls)")
    }

    /// The package as dpkg installs, removes and purges it, into a throwaway root: dpkg runs the
    /// maintainer scripts outside it with DPKG_ROOT set (`--force-script-chrootless`), as it does
    /// for a root made by a bootstrap tool. What `systemctl enable` and `propctl lock` leave
    /// there must go with the purge; the administrator's own files stay.
    func testDpkgInstallRemoveAndPurgeInAThrowawayRoot() async throws {
        guard getuid() == 0 else { throw XCTSkip("dpkg --root needs root") }
        guard let dpkg = tool("dpkg"), tool("dpkg-deb") != nil, tool("dpkg-shlibdeps") != nil, tool("fakeroot") != nil,
              let systemctl = tool("systemctl") else {
            throw XCTSkip("dpkg-dev, fakeroot or systemctl is not installed (scripts/setup installs them)")
        }
        let directory = try makeTemporaryDirectory(prefix: "pbit-deb")
        defer { try? FileManager.default.removeItem(at: directory) }
        let deb = try await buildPackage(into: directory)

        let root = directory.appendingPathComponent("root").path
        for folder in ["/var/lib/dpkg/info", "/var/lib/dpkg/updates", "/etc"] {
            try FileManager.default.createDirectory(atPath: root + folder, withIntermediateDirectories: true)
        }
        FileManager.default.createFile(atPath: root + "/var/lib/dpkg/status", contents: Data())
        let path = ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"]
        func run(_ action: [String]) async throws {
            let result = try await runCommand(dpkg, ["--root=\(root)", "--force-script-chrootless", "--force-depends", "--log=/dev/null"] + action,
                                              environment: path, timeout: 120)
            XCTAssertEqual(result.status, 0, "dpkg \(action): \(result)")
        }
        func exists(_ file: String) -> Bool {
            var info = stat()
            return lstat(root + file, &info) == 0
        }
        try await run(["-i", deb])
        let passwd = try String(contentsOfFile: root + "/etc/passwd", encoding: .utf8)
        let user = try XCTUnwrap(passwd.split(separator: "\n").first { $0.hasPrefix("propbus:") }, passwd).split(separator: ":")
        let uid = try XCTUnwrap(UInt32(user[2]))
        var info = stat()
        XCTAssertEqual(stat(root + "/etc/propbus/mandatory.d", &info), 0, "the directory propbusd keeps locks in")
        XCTAssertEqual(info.st_uid, uid, "propbusd, running as propbus, writes the locks")

        // A daemon started by hand as root, refused the bus name: the service user's state
        // directory keeps nothing only root may write.
        let bus = try await PrivateBus.start()
        defer { Task { await bus.stop() } }
        let owner = try await Client.connect(to: bus)
        defer { owner.close() }
        _ = try await owner.connection.callBus("RequestName", [.string(PropBusAPI.busName), .uint32(4)])
        var daemonEnvironment = bus.environment
        daemonEnvironment["STATE_DIRECTORY"] = root + "/var/lib/propbus"
        let refused = try await runCommand(BuildProducts.propbusd, ["--address", bus.address], environment: daemonEnvironment, timeout: 30)
        XCTAssertEqual(refused.termination, .exited(1), "\(refused)")
        for name in try FileManager.default.contentsOfDirectory(atPath: root + "/var/lib/propbus") {
            XCTAssertEqual(stat(root + "/var/lib/propbus/" + name, &info), 0)
            XCTAssertEqual(info.st_uid, uid, "\(name) is root's: the service could not use it")
        }

        // What an administrator does while it is installed.
        let enable = try await runCommand(systemctl, ["--root=\(root)", "enable", "propbusd.service"], environment: path)
        XCTAssertEqual(enable.status, 0, "\(enable)")
        let wants = "/etc/systemd/system/multi-user.target.wants/propbusd.service"
        XCTAssertTrue(exists(wants), "\(enable)")
        try #"{"app.volume": 20}"#.write(toFile: root + "/etc/propbus/mandatory.d/50-propctl.json", atomically: true, encoding: .utf8)
        try #"{"app.volume": 10}"#.write(toFile: root + "/etc/propbus/mandatory.d/10-site.json", atomically: true, encoding: .utf8)
        try "{}".write(toFile: root + "/etc/propbus/models/mine.json", atomically: true, encoding: .utf8)

        try await run(["-r", "propbus"])
        XCTAssertFalse(exists("/usr/bin/propbusd"))
        XCTAssertTrue(exists("/var/lib/propbus") && exists("/etc/propbus/mandatory.d/50-propctl.json"), "remove keeps the store and the locks")

        try await run(["-P", "propbus"])
        XCTAssertFalse(exists(wants), "purge left the enablement link dangling")
        XCTAssertFalse(exists("/etc/systemd/system/propbusd.service"), "purge left the unit masked")
        XCTAssertFalse(exists("/var/lib/propbus"), "purge kept the store")
        XCTAssertFalse(exists("/etc/propbus/mandatory.d/50-propctl.json"), "purge kept the file propctl lock wrote")
        XCTAssertTrue(exists("/etc/propbus/mandatory.d/10-site.json") && exists("/etc/propbus/models/mine.json"),
                      "purge deleted the administrator's own files")
    }
}
