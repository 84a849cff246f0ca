import Foundation
import Glibc
import PropBus
import PropBusModelFiles
import SystemKit
import XCTest

@testable import PropBusRender

/// `renders` in a model file: every field read and checked, problems named with file, line and
/// column, and only files root owns (and no one else may write) may declare renders.
final class RenderDeclarationTests: XCTestCase {
    private var directory: String!

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("propbus-decl-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(atPath: directory)
    }

    private func modelFile(_ renders: String) throws -> ModelFile {
        try ModelFile(path: directory + "/web.json", text: #"{"renders": {\#(renders)}}"#)
    }

    private func problem(_ renders: String) -> String {
        do {
            _ = try modelFile(renders)
            return ""
        } catch {
            return (error as? PropBusError)?.message ?? "\(error)"
        }
    }

    func testEveryFieldIsRead() throws {
        try "upstream {{ web.name }}\n".write(toFile: directory + "/nginx.tmpl", atomically: true, encoding: .utf8)
        let file = try modelFile(#"""
            "nginx": {"template": "nginx.tmpl", "destination": "/etc/nginx/nginx.conf", "owner": "www-data", "group": 33, "mode": "0640",
                      "check": ["./check.sh", "{{file}}"], "reload": ["systemctl", "reload", "nginx"], "wait": {"min": 0.5, "max": 3},
                      "require": ["web.name", "web.backends.*"], "escape": "xml", "timeout": 10, "description": "the proxy"}
            """#)
        let render = try XCTUnwrap(file.renders.first)
        XCTAssertEqual(render.name, "nginx")
        XCTAssertEqual(render.templatePath, directory + "/nginx.tmpl")
        XCTAssertEqual(render.destination, "/etc/nginx/nginx.conf")
        XCTAssertEqual(render.owner, .name("www-data"))
        XCTAssertEqual(render.group, .id(33))
        XCTAssertEqual(render.mode, 0o640)
        XCTAssertEqual(render.check, [directory + "/check.sh", "{{file}}"], "./ is the model file's directory")
        XCTAssertEqual(render.reload, ["systemctl", "reload", "nginx"])
        XCTAssertEqual(render.wait, RenderWait(minimum: 500_000_000, maximum: 3_000_000_000))
        XCTAssertEqual(render.requirements, [.key("web.name"), .group("web.backends")])
        XCTAssertEqual(render.escaping, .xml)
        XCTAssertEqual(render.timeout, 10)
        XCTAssertEqual(render.keys, ["web.name"])
        XCTAssertEqual(render.groups, ["web.backends"])
    }

    func testASingleWaitLetsTheKeysSettleForFourTimesAsLongAtMost() throws {
        let render = try XCTUnwrap(try modelFile(#""a": {"template_text": "x", "destination": "/tmp/a", "wait": 2}"#).renders.first)
        XCTAssertEqual(render.wait, RenderWait(minimum: 2_000_000_000, maximum: 8_000_000_000))
        XCTAssertEqual(render.mode, 0o644)
        XCTAssertEqual(render.escaping, .text)
    }

    func testProblemsAreNamedWithTheirPlace() {
        XCTAssertTrue(problem(#""a-b": {"template_text": "x", "destination": "/tmp/a"}"#).contains("a render's name must match"))
        XCTAssertTrue(problem(#""a": {"template_text": "x"}"#).contains("needs \"destination\""))
        XCTAssertTrue(problem(#""a": {"template_text": "x", "destination": "etc/a"}"#).contains("absolute path"))
        XCTAssertTrue(problem(#""a": {"template_text": "x", "destination": "/tmp/a", "mode": 644}"#).contains("octal digits"))
        XCTAssertTrue(problem(#""a": {"template_text": "x", "destination": "/tmp/a", "mode": "4755"}"#).contains("no setuid"))
        XCTAssertTrue(problem(#""a": {"template_text": "x", "destination": "/tmp/a", "check": "nginx -t"}"#).contains("argv"))
        XCTAssertTrue(problem(#""a": {"template_text": "x", "destination": "/tmp/a", "wait": {"min": 3, "max": 1}}"#).contains("max at least min"))
        XCTAssertTrue(problem(#""a": {"template_text": "x", "destination": "/tmp/a", "escape": "html"}"#).contains("one of text, raw, json, xml, shell"))
        XCTAssertTrue(problem(#""a": {"template_text": "x", "destination": "/tmp/a", "colour": 1}"#).contains("unknown field \"colour\""))
        XCTAssertTrue(problem(#""a": {"template": "none.tmpl", "destination": "/tmp/a"}"#).contains("cannot read the template"))
        let template = problem(#""a": {"template_text": "line\n{{ if a.b }}", "destination": "/tmp/a"}"#)
        XCTAssertTrue(template.hasPrefix(directory + "/web.json:1:"), template)
        XCTAssertTrue(template.contains("renders.a: template text:2:1: {{ if }} is not closed"), template)
    }

    func testOnlyAFileRootOwnsAndNoOneElseMayWriteDeclaresRenders() throws {
        let text = #"{"renders": {"a": {"template_text": "x", "destination": "/tmp/a"}}}"#
        let path = directory + "/web.json"
        XCTAssertNoThrow(try ModelFile(path: path, text: text, ownership: .init(userID: 0, groupID: 0, mode: 0o644)))
        XCTAssertThrowsError(try ModelFile(path: path, text: text, ownership: .init(userID: 1000, groupID: 0, mode: 0o644))) { error in
            XCTAssertTrue("\(error)".contains("owned by uid 1000"), "\(error)")
        }
        XCTAssertThrowsError(try ModelFile(path: path, text: text, ownership: .init(userID: 0, groupID: 0, mode: 0o664))) { error in
            XCTAssertTrue("\(error)".contains("mode 0664"), "\(error)")
        }
        // A file without renders may be anyone's, as before.
        XCTAssertNoThrow(try ModelFile(path: path, text: #"{"groups": {}}"#, ownership: .init(userID: 1000, groupID: 0, mode: 0o666)))
        XCTAssertEqual(FileTrust.refusal(.init(userID: 1000, groupID: 0, mode: 0o600), of: path, what: "it", daemonUserID: 1000), nil,
                       "a user's daemon renders with that user's files")
    }

    func testARenderNameAndADestinationAreOneFilesAndASkippedFileKeepsItsRenders() throws {
        func file(_ name: String, _ renders: String) -> ModelFileSet.ReadFile {
            let path = directory + "/" + name
            return (path, Result { () throws(PropBusError) in try ModelFile(path: path, text: #"{"renders": {\#(renders)}}"#) })
        }
        let model = try PropertyModel(store: MemoryStore())
        let commands = CommandTable(model: model)
        let set = ModelFileSet()
        let first = file("a.json", #""site": {"template_text": "x", "destination": "/tmp/site.conf"}"#)
        let sameName = file("b.json", #""site": {"template_text": "y", "destination": "/tmp/other.conf"}"#)
        let sameFile = file("c.json", #""copy": {"template_text": "z", "destination": "/tmp/site.conf"}"#)
        _ = try set.load(files: [first, sameName, sameFile], into: model, commands: commands, strict: false)
        XCTAssertEqual(set.renders.map(\.name), ["site"])
        XCTAssertEqual(set.skipped.map(\.path), [directory + "/b.json", directory + "/c.json"])
        XCTAssertTrue(set.skipped[0].reason.contains("declared by \(directory!)/a.json already"), set.skipped[0].reason)
        XCTAssertTrue(set.skipped[1].reason.contains("render site writes /tmp/site.conf already"), set.skipped[1].reason)
        // a.json breaks: its render stays as its last load declared it.
        let broken: ModelFileSet.ReadFile = (directory + "/a.json", .failure(PropBusError(.invalidArgs, "a.json:1:1: invalid JSON")))
        _ = try set.load(files: [broken], into: model, commands: commands, strict: false)
        XCTAssertEqual(set.renders.map(\.name), ["site"])
        _ = try set.load(files: [], into: model, commands: commands, strict: false)
        XCTAssertEqual(set.renders.map(\.name), [], "a file that is gone takes its renders with it")
    }
}
