import Glibc
import SystemKit
import XCTest

final class FileSystemTests: XCTestCase {
    private var directory = ""

    override func setUpWithError() throws {
        var template = Array("/tmp/systemkit.XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        directory = try String(cString: XCTUnwrap(made))
    }

    override func tearDown() {
        _ = system("rm -rf '\(directory)'")
    }

    func testCreateDirectoriesMakesParentsWithTheModeAndAcceptsAnExistingOne() throws {
        let path = directory + "/a/b/c"
        try FileSystem.createDirectories(path, mode: 0o700)
        XCTAssertTrue(FileSystem.isDirectory(path))
        var status = stat()
        XCTAssertEqual(stat(directory + "/a", &status), 0)
        XCTAssertEqual(status.st_mode & 0o777, 0o700)
        XCTAssertNoThrow(try FileSystem.createDirectories(path, mode: 0o700))
        XCTAssertNoThrow(try FileSystem.createDirectories(path + "/", mode: 0o700))
    }

    func testCreateDirectoriesOverAFileIsAnError() throws {
        let file = directory + "/file"
        let descriptor = try FileDescriptor.open(file, O_WRONLY | O_CREAT)
        try descriptor.close()
        // The file is met as a parent that cannot be made, as with `mkdir -p`.
        XCTAssertThrowsError(try FileSystem.createDirectories(file + "/below", mode: 0o700)) { error in
            XCTAssertEqual(error as? Errno, .fileExists)
        }
        XCTAssertThrowsError(try FileSystem.createDirectories(file, mode: 0o700)) { error in
            XCTAssertEqual(error as? Errno, .fileExists)
        }
    }

    func testWriteReadRenameAndList() throws {
        let file = directory + "/one"
        let descriptor = try FileDescriptor.open(file, O_WRONLY | O_CREAT | O_TRUNC)
        try descriptor.writeAll("héllo\n")
        try descriptor.writeAll([UInt8](repeating: 65, count: 100_000))
        try descriptor.close()
        let bytes = try FileSystem.contents(of: file)
        XCTAssertEqual(bytes.count, 7 + 100_000)
        XCTAssertEqual(String(decoding: bytes.prefix(7), as: UTF8.self), "héllo\n")
        XCTAssertTrue(FileSystem.exists(file))
        try FileSystem.rename(file, to: directory + "/two")
        XCTAssertFalse(FileSystem.exists(file))
        XCTAssertEqual(try FileSystem.contentsOfDirectory(directory), ["two"])
        XCTAssertThrowsError(try FileSystem.contents(of: file)) { error in
            XCTAssertEqual(error as? Errno, .noSuchFileOrDirectory)
            XCTAssertEqual((error as? Errno)?.description, "No such file or directory")
        }
        XCTAssertThrowsError(try FileSystem.contentsOfDirectory(directory + "/none"))
    }

    func testAbsolutePathsAreStandardizedLikeURL() {
        XCTAssertEqual(FileSystem.absolute("/a/./b/../c//d/"), "/a/c/d")
        XCTAssertEqual(FileSystem.absolute("/.."), "/")
        XCTAssertEqual(FileSystem.absolute("x/y"), FileSystem.currentDirectory + "/x/y")
        XCTAssertEqual(FileSystem.directory(of: "/a/b"), "/a")
        XCTAssertEqual(FileSystem.directory(of: "/a"), "/")
        XCTAssertEqual(FileSystem.lastComponent(of: "/a/b"), "b")
    }
}
