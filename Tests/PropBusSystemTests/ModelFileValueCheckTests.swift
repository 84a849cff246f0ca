import DBusValues
import PropBus
import PropBusModelFiles
import XCTest

/// A model file is refused when it declares what the model refuses (the value checks against hostile input,
/// moved from HostileValueCheckTests, which needs no file adapter).
final class ModelFileValueCheckTests: XCTestCase {
    private func model() throws -> PropertyModel { try PropertyModel(store: MemoryStore()) }

    func testModelFileDeclaringAnFDTypeIsRefusedNamingFileAndKey() throws {
        let model = try model()
        let file = try ModelFile(path: "fds.json", text: #"{"groups": {"dev": {"properties": {"handle": {"type": "ah", "default": []}}}}}"#)
        XCTAssertThrowsError(try file.apply(to: model, commands: CommandTable(model: model))) { error in
            XCTAssertEqual((error as? PropBusError)?.code, .invalidArgs)
            for fragment in ["fds.json", "dev.handle", "unix fd"] {
                XCTAssertTrue("\(error)".contains(fragment), "'\(error)' does not contain '\(fragment)'")
            }
        }
        XCTAssertNil(model.entry(for: try Key("dev.handle")))
    }
}
