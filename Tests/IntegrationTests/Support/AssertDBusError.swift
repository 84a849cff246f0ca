import DBus
import XCTest

extension XCTestCase {
    /// Asserts that `body` throws a D-Bus error named `name` whose message contains each of `fragments`.
    func assertDBusError<T>(_ name: String, containing fragments: [String] = [],
                            file: StaticString = #filePath, line: UInt = #line,
                            _ body: () async throws -> T) async {
        do {
            let result = try await body()
            XCTFail("expected \(name), got a reply: \(result)", file: file, line: line)
        } catch let error as DBusError {
            XCTAssertEqual(error.name, name, "message: \(error.message)", file: file, line: line)
            for fragment in fragments {
                XCTAssertTrue(error.message.contains(fragment), "'\(error.message)' does not contain '\(fragment)'", file: file, line: line)
            }
        } catch {
            XCTFail("expected \(name), got \(error)", file: file, line: line)
        }
    }
}
