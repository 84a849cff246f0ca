import Foundation
import XCTest

/// The units' reload line, read from the files: `systemctl reload` must reach the daemon's SIGHUP
/// handler, which reads the model files again.
final class ReloadUnitFileTests: XCTestCase {
    func testUnitsReloadWithSIGHUP() throws {
        let systemd = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("systemd")
        for unit in ["propbusd.service", "propbusd-user.service"] {
            let text = try String(contentsOf: systemd.appendingPathComponent(unit), encoding: .utf8)
            XCTAssertTrue(text.contains("\nExecReload=/bin/kill -HUP $MAINPID\n"), unit)
        }
    }
}
