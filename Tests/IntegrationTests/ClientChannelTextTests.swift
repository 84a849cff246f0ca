import DBus
import Foundation
import PropBus
import XCTest

/// `propctl bind --exec/--stdio` lines are text: a line that is not UTF-8, or holds a NUL byte, is
/// refused with a message naming the offset, never set with replacement characters.
final class ClientChannelTextTests: DaemonTestCase {
    func testLinesThatAreNotTextAreRefusedNotReplaced() async throws {
        try await client.create("ui.text", "s", default: .string("initial"))
        let recorder = try await client.recordChanges(ofGroup: "ui")
        // After the bus value: a Latin-1 line, a line with a NUL, then text.
        let script = #"read first; printf 'caf\351\n'; printf 'a\0b\n'; echo good; sleep 30"#
        let bind = try ChildProcess(BuildProducts.propctl, ["--address", bus.address, "bind", "ui.text", "--exec", script],
                                    environment: bus.environment)
        let good = await eventually(timeout: 10) { (try? await self.client.get("ui.text")) == .string("good") }
        // "good" came after the two other lines: had either been set, it would have been announced first.
        let announced = await recorder.wait { $0.contains { $0.changed["text"] == .string("good") } }.compactMap { $0.changed["text"] }
        let said = await eventually { bind.stderr.contains("offset 1") }
        let stderr = bind.stderr
        _ = await bind.stop()
        XCTAssertTrue(good, stderr)
        XCTAssertEqual(announced, [.string("good")], stderr)
        XCTAssertTrue(said, stderr)
        XCTAssertTrue(stderr.contains("ignored a line that is not UTF-8 text (invalid UTF-8 at offset 3)"), stderr)
        XCTAssertTrue(stderr.contains("ignored a line that is not UTF-8 text (a NUL byte at offset 1)"), stderr)
    }
}
