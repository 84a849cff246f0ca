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

    func testPackageHoldsTheInstallTreeWithComputedDependsAndLintianFindsNoError() async throws {
        guard let dpkgDeb = tool("dpkg-deb"), tool("dpkg-shlibdeps") != nil, tool("fakeroot") != nil else {
            throw XCTSkip("dpkg-dev or fakeroot is not installed (scripts/setup installs them)")
        }
        let directory = try makeTemporaryDirectory(prefix: "pbit-deb")
        defer { try? FileManager.default.removeItem(at: directory) }
        var environment = ProcessInfo.processInfo.environment
        // Debug binaries keep the test fast; scripts/package itself builds release.
        environment["PROPBUS_BUILD_DIR"] = BuildProducts.directory.path
        environment["OUTDIR"] = directory.path
        let built = try await runCommand(Self.packageRoot.appendingPathComponent("scripts/package").path, [],
                                         environment: environment, timeout: 300)
        XCTAssertEqual(built.status, 0, "\(built)")
        let deb = built.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertTrue(deb.hasPrefix(directory.path + "/propbus_") && deb.hasSuffix("_amd64.deb"), deb)
        XCTAssertTrue(FileManager.default.fileExists(atPath: deb), "\(built)")

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
        for script in ["postinst", "postrm"] {
            let info = try await runCommand(dpkgDeb, ["--info", deb, script], environment: [:])
            XCTAssertEqual(info.status, 0, "\(script) is not in the control archive: \(info)")
        }

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
    /// the tools that would change this machine.
    private func runMaintainerScript(_ name: String, _ argument: String, root: String?, in directory: URL) async throws
        -> (CommandResult, calls: [String]) {
        let fakes = directory.appendingPathComponent("fake-bin")
        try FileManager.default.createDirectory(at: fakes, withIntermediateDirectories: true)
        let log = directory.appendingPathComponent("calls")
        for tool in ["systemd-sysusers", "systemd-tmpfiles", "systemctl", "dbus-send", "deb-systemd-invoke", "invoke-rc.d"] {
            let path = fakes.appendingPathComponent(tool).path
            try "#!/bin/sh\necho \"\(tool) $*\" >> '\(log.path)'\n".write(toFile: path, atomically: true, encoding: .utf8)
            chmod(path, 0o755)
        }
        try? FileManager.default.removeItem(at: log)
        var environment = ["PATH": fakes.path + ":/usr/bin:/bin:/usr/sbin:/sbin"]
        environment["DPKG_ROOT"] = root
        let script = Self.packageRoot.appendingPathComponent("packaging/debian/\(name)").path
        let result = try await runCommand(script, [argument], environment: environment)
        let calls = ((try? String(contentsOf: log, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        return (result, calls)
    }

    func testPostinstCreatesTheUserAndDirectoriesAndStartsNothing() async throws {
        let directory = try makeTemporaryDirectory(prefix: "pbit-deb")
        defer { try? FileManager.default.removeItem(at: directory) }
        let (result, calls) = try await runMaintainerScript("postinst", "configure", root: nil, in: directory)
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertEqual(Array(calls.prefix(2)), ["systemd-sysusers propbus.conf", "systemd-tmpfiles --create propbus.conf"], "\(calls)")
        for call in calls.dropFirst(2) {
            XCTAssertTrue(call == "systemctl --system daemon-reload" || call.hasPrefix("dbus-send --system") && call.hasSuffix("ReloadConfig"),
                          "postinst ran \(call)")
        }
        XCTAssertFalse(calls.contains { $0.contains(" start") || $0.contains("enable") || $0.contains("restart") }, "\(calls)")

        // Into another root (DPKG_ROOT), the tools are told so and nothing reloads.
        let (rooted, rootedCalls) = try await runMaintainerScript("postinst", "configure", root: directory.path + "/root", in: directory)
        XCTAssertEqual(rooted.status, 0, "\(rooted)")
        XCTAssertEqual(rootedCalls, ["systemd-sysusers --root=\(directory.path)/root propbus.conf",
                                     "systemd-tmpfiles --root=\(directory.path)/root --create propbus.conf"])
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

        let (purged, _) = try await runMaintainerScript("postrm", "purge", root: root, in: directory)
        XCTAssertEqual(purged.status, 0, "\(purged)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: store), "purge kept the store")
        XCTAssertTrue(FileManager.default.fileExists(atPath: root + "/etc/propbus/models/mine.json"),
                      "purge deleted an administrator's model file")
    }
}
