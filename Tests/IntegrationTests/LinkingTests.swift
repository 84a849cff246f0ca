import Foundation
import XCTest

/// Both programs start like C programs: neither links Foundation nor ICU, whose
/// libraries cost propctl most of its start-up time and the daemon megabytes of resident pages.
final class LinkingTests: XCTestCase {
    /// The shared libraries `ldd` lists for `binary`.
    private func sharedLibraries(_ binary: String) async throws -> [String] {
        let ldd = try await runCommand("/usr/bin/ldd", [binary], environment: ProcessInfo.processInfo.environment)
        XCTAssertEqual(ldd.termination, .exited(0), "\(ldd)")
        return ldd.stdout.split(separator: "\n").compactMap { line in
            line.split(whereSeparator: { $0 == " " || $0 == "\t" }).first.map(String.init)
        }
    }

    func testNeitherBinaryLinksFoundationOrICU() async throws {
        for binary in [BuildProducts.propctl, BuildProducts.propbusd] {
            let libraries = try await sharedLibraries(binary)
            XCTAssertFalse(libraries.isEmpty, binary)
            let unwanted = libraries.filter { $0.hasPrefix("libFoundation") || $0.hasPrefix("lib_FoundationICU") || $0.hasPrefix("libicu") }
            XCTAssertEqual(unwanted, [], "\(binary) links \(unwanted.joined(separator: ", "))")
        }
    }

    /// libcurl and what it needs (OpenSSL, Kerberos, LDAP…) cost an idle daemon about 6 MiB of
    /// resident pages: the Etcd library opens it with dlopen, only when --fleet makes a client.
    func testNeitherBinaryLinksLibcurl() async throws {
        for binary in [BuildProducts.propctl, BuildProducts.propbusd] {
            let libraries = try await sharedLibraries(binary)
            XCTAssertFalse(libraries.isEmpty, binary)
            let unwanted = libraries.filter { $0.hasPrefix("libcurl") || $0.hasPrefix("libssl") || $0.hasPrefix("libkrb5") }
            XCTAssertEqual(unwanted, [], "\(binary) links \(unwanted.joined(separator: ", "))")
        }
    }

    /// propctl is a client: the store is the daemon's, so the CLI links no SQLite (it spawns
    /// `serve` handlers and reads model files through targets that do not depend on the store).
    func testPropctlDoesNotLinkSQLite() async throws {
        let libraries = try await sharedLibraries(BuildProducts.propctl)
        XCTAssertFalse(libraries.isEmpty)
        let unwanted = libraries.filter { $0.hasPrefix("libsqlite3") }
        XCTAssertEqual(unwanted, [], "propctl links \(unwanted.joined(separator: ", "))")
    }
}
