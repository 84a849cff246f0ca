import Foundation
import Glibc
import Synchronization
import SystemKit
import XCTest

@testable import PropBusRender

/// The installer on real files: a staged file has its owner and mode before its first byte,
/// the destination is replaced by a rename, what was there can be put back, and what a killed
/// daemon left behind is removed.
final class FileInstallerTests: XCTestCase {
    private var directory: String!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("propbus-install-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: directory)
    }

    private func ownership(of path: String) -> FileSystem.Ownership? {
        var status = stat()
        guard lstat(path, &status) == 0 else { return nil }
        return FileSystem.Ownership(userID: status.st_uid, groupID: status.st_gid, mode: status.st_mode & 0o7777)
    }

    private let nobody = FileSystem.Ownership(userID: 65534, groupID: 65534, mode: 0o640)

    func testAStagedFileHasItsOwnerAndModeBeforeItsFirstByte() throws {
        try XCTSkipUnless(geteuid() == 0, "giving a file to another user needs root")
        let destination = directory + "/secret.conf"
        let bytes = [UInt8](repeating: UInt8(ascii: "x"), count: 32 << 20)
        // Watch the directory while 32 MiB are written: every look at the staged file that
        // finds a byte in it finds the final owner and mode too.
        let done = Atomic(false)
        let seen = Mutex<[FileSystem.Ownership]>([])
        let watcher = Thread { [directory = directory!] in
            while !done.load(ordering: .acquiring) {
                for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] where name.hasPrefix(".secret.conf.propbus-") {
                    var status = stat()
                    guard stat(directory + "/" + name, &status) == 0, status.st_size > 0 else { continue }
                    let observed = FileSystem.Ownership(userID: status.st_uid, groupID: status.st_gid, mode: status.st_mode & 0o7777)
                    seen.withLock { $0.append(observed) }
                }
            }
        }
        watcher.start()
        let path = try FileInstaller.stage(FileVersion(bytes: bytes, ownership: nobody), beside: destination)
        done.store(true, ordering: .releasing)
        XCTAssertEqual(ownership(of: path), nobody)
        XCTAssertEqual(FileManager.default.contents(atPath: path)?.count, bytes.count)
        let observations = seen.withLock { $0 }
        XCTAssertTrue(observations.allSatisfy { $0 == nobody }, "\(Set(observations.map { "\($0)" }))")
        XCTAssertFalse(FileManager.default.fileExists(atPath: destination), "staging must not touch the destination")
    }

    func testInstallReplacesTheDestinationAndRestorePutsThePreviousFileBack() throws {
        let destination = directory + "/app.conf"
        try Data("old\n".utf8).write(to: URL(fileURLWithPath: destination))
        chmod(destination, 0o600)
        let previous = try FileInstaller.current(at: destination)
        XCTAssertEqual(previous?.bytes, Array("old\n".utf8))
        let me = FileSystem.Ownership(userID: geteuid(), groupID: getegid(), mode: 0o644)
        let path = try FileInstaller.stage(FileVersion(bytes: Array("new\n".utf8), ownership: me), beside: destination)
        XCTAssertEqual(try String(contentsOfFile: destination, encoding: .utf8), "old\n", "the destination changes only at the rename")
        try FileInstaller.install(StagedFile(path: path, destination: destination, previous: previous))
        XCTAssertEqual(try String(contentsOfFile: destination, encoding: .utf8), "new\n")
        XCTAssertEqual(ownership(of: destination)?.mode, 0o644)
        XCTAssertFalse(FileManager.default.fileExists(atPath: path))

        try FileInstaller.restore(previous, at: destination)
        XCTAssertEqual(try String(contentsOfFile: destination, encoding: .utf8), "old\n")
        XCTAssertEqual(ownership(of: destination)?.mode, 0o600)
        try FileInstaller.restore(nil, at: destination)
        XCTAssertFalse(FileManager.default.fileExists(atPath: destination), "there was no file before: putting back removes it")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: directory), [], "nothing left beside it")
    }

    func testASymbolicLinkIsRefusedAsADestination() throws {
        let destination = directory + "/link.conf"
        symlink(directory + "/target.conf", destination)
        XCTAssertThrowsError(try FileInstaller.current(at: destination)) { error in
            XCTAssertTrue((error as? InstallError)?.message.contains("symbolic link") == true, "\(error)")
        }
    }

    func testStagingIntoAMissingDirectoryFailsAndLeavesNothing() {
        XCTAssertThrowsError(try FileInstaller.stage(FileVersion(bytes: [1], ownership: nobody), beside: directory + "/none/app.conf")) { error in
            XCTAssertTrue((error as? InstallError)?.message.contains("cannot stage") == true, "\(error)")
        }
    }

    func testLeftoversOfAKilledDaemonAreRemovedAndNothingElse() throws {
        let destination = directory + "/app.conf"
        for name in [".app.conf.propbus-0123456789abcdef", ".app.conf.propbus-fedcba9876543210", "app.conf", ".other.conf.propbus-1"] {
            FileManager.default.createFile(atPath: directory + "/" + name, contents: Data("x".utf8))
        }
        XCTAssertEqual(FileInstaller.removeLeftovers(of: destination).count, 2)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: directory).sorted(), [".other.conf.propbus-1", "app.conf"])
    }
}
