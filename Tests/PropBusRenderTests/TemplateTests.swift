import DBusValues
import PropBus
import XCTest

@testable import PropBusRender

/// Values from a table, as the daemon's model gives them.
struct TableValues: RenderValues {
    var values: [String: DBusValue] = [:]
    var secrets: Set<String> = []

    func renderValue(of key: String) -> (value: DBusValue, secret: Bool)? {
        values[key].map { ($0, secrets.contains(key)) }
    }

    func renderNames(inGroup group: String) -> [String] {
        values.keys.filter { RenderRunner.group(of: $0) == group }.map { String($0.dropFirst(group.count + 1)) }.sorted()
    }
}

/// The template language (docs/render.md): parsing, values, conditions, loops, whitespace,
/// escaping, and what a render may and may not say about secrets.
final class TemplateTests: XCTestCase {
    private func render(_ text: String, _ values: TableValues, escaping: Escaping = .text) throws -> String {
        let template = try Template(text)
        switch template.render(values, escaping: escaping) {
        case .success(let output): return String(decoding: output.bytes, as: UTF8.self)
        case .failure(let failure): throw failure
        }
    }

    private func failure(_ text: String, _ values: TableValues, escaping: Escaping = .text) throws -> RenderFailure {
        switch try Template(text).render(values, escaping: escaping) {
        case .success(let output):
            XCTFail("rendered \(String(decoding: output.bytes, as: UTF8.self))")
            return .failed("")
        case .failure(let failure): return failure
        }
    }

    private func parseError(_ text: String) -> TemplateError? {
        do {
            _ = try Template(text)
            return nil
        } catch {
            return error
        }
    }

    private let web = TableValues(values: [
        "web.port": .int32(8080), "web.name": .string("shop"), "web.tls": .boolean(false),
        "web.backends.b": .string("10.0.0.2:80"), "web.backends.a": .string("10.0.0.1:80"),
        "web.tags": .array(of: .string, [.string("x"), .string("y")]),
    ])

    func testExpressionsOfKeysAreWrittenAsPropctlPrintsThem() throws {
        XCTAssertEqual(try render("listen {{ web.port }}; # {{ upper(web.name) + \"-\" + string(web.port + 1) }}\n", web),
                       "listen 8080; # SHOP-8081\n")
    }

    func testConditionalsTakeTheFirstBranchWhoseConditionHolds() throws {
        let text = "{{ if web.tls }}tls{{ else if web.port == 8080 }}plain{{ else }}other{{ end }}"
        XCTAssertEqual(try render(text, web), "plain")
        var tls = web
        tls.values["web.tls"] = .boolean(true)
        XCTAssertEqual(try render(text, tls), "tls")
    }

    func testARangeWalksAGroupsKeysInNameOrderWithTheirFields() throws {
        let text = """
            upstream {{ web.name }} {
            {{ range server in web.backends.* }}
                server {{ server.value }}; # {{ server.index }} {{ server.name }} {{ server.key }}{{ if server.last }} last{{ end }}
            {{ end }}
            }

            """
        XCTAssertEqual(try render(text, web), """
            upstream shop {
                server 10.0.0.1:80; # 0 a web.backends.a
                server 10.0.0.2:80; # 1 b web.backends.b last
            }

            """)
    }

    func testARangeOfAnEmptyGroupWritesItsElse() throws {
        let text = "{{ range s in web.none.* }}{{ s.value }}{{ else }}none{{ end }}"
        XCTAssertEqual(try render(text, web), "none")
    }

    func testARangeWalksAnArrayKeyAndJSONEscapingMakesAList() throws {
        let text = "[{{ range t in web.tags }}{{ t.value | json }}{{ if !t.last }}, {{ end }}{{ end }}]"
        XCTAssertEqual(try render(text, web), #"["x", "y"]"#)
    }

    func testStandaloneControlLinesLeaveNoBlankLinesAndDashesTrim() throws {
        let text = "a\n  {{ if web.tls }}\nb\n  {{ else }}\nc\n  {{ end }}\nd  {{- \" e\" -}}  \n f\n"
        XCTAssertEqual(try render(text, web), "a\nc\nd ef\n")
    }

    func testCommentsAndLiteralBracesAreWritten() throws {
        XCTAssertEqual(try render("{{/* not written */}}x{{ \"{{\" }}y{{ \"}}\" }}", web), "x{{y}}")
    }

    // MARK: Escaping

    func testTextEscapingRefusesANewlineThatWouldStartADirectiveWithoutQuotingTheValue() throws {
        let values = TableValues(values: ["web.name": .string("shop;\ninclude /etc/shadow")])
        let refused = try failure("server_name {{ web.name }};", values)
        guard case .failed(let message) = refused else { return XCTFail("\(refused)") }
        XCTAssertTrue(message.contains("line feed") && message.contains("1:13"), message)
        XCTAssertFalse(message.contains("shadow"), message)
        XCTAssertEqual(try render("{{ web.name | shell }}", values), "'shop;\ninclude /etc/shadow'")
    }

    func testEachEscapingWritesTheValueSoItCannotChangeTheFilesStructure() throws {
        let values = TableValues(values: ["a.b": .string(#"<it's "x" & y>"#)])
        XCTAssertEqual(try render("{{ a.b }}", values, escaping: .xml), "&lt;it&apos;s &quot;x&quot; &amp; y&gt;")
        XCTAssertEqual(try render("{{ a.b }}", values, escaping: .json), #""<it's \"x\" & y>""#)
        XCTAssertEqual(try render("{{ a.b }}", values, escaping: .shell), #"'<it'\''s "x" & y>'"#)
        XCTAssertEqual(try render("{{ a.b | raw }}", values, escaping: .xml), #"<it's "x" & y>"#)
    }

    // MARK: Keys

    func testAMissingKeyIsReportedAsWaitingNotAsAnError() throws {
        let missing = try failure("{{ web.port }} {{ web.gone }}", web)
        XCTAssertEqual(missing, .missingKey("web.gone", message: "1:16: {{ web.gone }} reads web.gone, which does not exist"))
    }

    func testTheTemplateNamesTheKeysAndGroupsItReadsButNotLoopVariables() throws {
        let template = try Template("{{ range s in web.backends.* }}{{ s.value }}{{ end }}{{ if web.tls }}{{ web.cert }}{{ end }}{{ range t in web.tags }}{{ t.value }}{{ end }}")
        XCTAssertEqual(template.keys, ["web.tls", "web.cert", "web.tags"])
        XCTAssertEqual(template.groups, ["web.backends"])
    }

    func testAConditionMustBeABoolean() throws {
        guard case .failed(let message) = try failure("{{ if web.name }}x{{ end }}", web) else { return XCTFail() }
        XCTAssertTrue(message.contains("must be a boolean, got 'string'"), message)
    }

    // MARK: Parse errors

    func testParseErrorsNameTheLineAndColumn() {
        XCTAssertEqual(parseError("a\n  {{ if web.x }}b")?.description, "2:3: {{ if }} is not closed: add {{ end }}")
        XCTAssertEqual(parseError("{{ end }}")?.problem, "{{ end }} without {{ if }} or {{ range }}")
        XCTAssertEqual(parseError("x {{ web.port")?.location, TemplateLocation(line: 1, column: 3))
        XCTAssertTrue(parseError("{{ web.port | html }}")?.problem.contains("unknown escaping '| html'") == true)
        XCTAssertTrue(parseError("{{ range s in web.b.* }}{{ s.size }}{{ end }}")?.problem.contains("has no field 'size'") == true)
        XCTAssertTrue(parseError("{{ web.port + }}")?.problem.hasPrefix("in {{ web.port + }}: column") == true)
        XCTAssertNotNil(parseError("{{ if a.b }}{{ else }}{{ else }}{{ end }}"))
    }

    func testAnOrInAnExpressionIsNotAnEscapingBar() throws {
        XCTAssertEqual(try render("{{ web.tls || web.port > 1 }}", web), "true")
    }

    // MARK: Secrets

    func testAnErrorAboutASecretKeysValueIsWithheld() throws {
        let values = TableValues(values: ["vault.pin": .string("hunter2")], secrets: ["vault.pin"])
        guard case .failed(let message) = try failure("{{ int(vault.pin) }}", values) else { return XCTFail() }
        XCTAssertFalse(message.contains("hunter2"), message)
        XCTAssertTrue(message.contains("withheld") && message.contains("vault.pin"), message)
    }

    func testMaskingHidesSecretValuesAndTheBlocksTheyDecide() throws {
        let values = TableValues(values: ["vault.pin": .string("hunter2"), "vault.on": .boolean(true), "web.port": .int32(80)],
                                 secrets: ["vault.pin", "vault.on"])
        let text = "pin={{ vault.pin }} port={{ web.port }}\n{{ if vault.on }}\nhunter2-branch\n{{ end }}\n"
        let masked = try Template(text).render(values, escaping: .text, hiding: { _ in true })
        guard case .success(let output) = masked else { return XCTFail("\(masked)") }
        let shown = String(decoding: output.bytes, as: UTF8.self)
        XCTAssertFalse(shown.contains("hunter2"), shown)
        XCTAssertTrue(shown.hasPrefix("pin=<secret> port=80\n"), shown)
        XCTAssertTrue(output.masked)
        XCTAssertEqual(output.secretKeys, ["vault.pin", "vault.on"])
        XCTAssertTrue(try render(text, values).contains("hunter2-branch"))
        // Only the keys the reader may not read are hidden.
        let partly = try Template(text).render(values, escaping: .text, hiding: { $0 == "vault.pin" })
        guard case .success(let shown) = partly else { return XCTFail("\(partly)") }
        XCTAssertEqual(String(decoding: shown.bytes, as: UTF8.self), "pin=<secret> port=80\nhunter2-branch\n")
    }

    func testASecretLoopItemIsHiddenAndNamedByItsKey() throws {
        let values = TableValues(values: ["users.alice": .string("pw1"), "users.bob": .string("pw2")], secrets: ["users.bob"])
        let text = "{{ range u in users.* }}{{ u.name }}={{ u.value }};{{ end }}"
        guard case .success(let output) = try Template(text).render(values, escaping: .text, hiding: { $0 == "users.bob" }) else { return XCTFail() }
        XCTAssertEqual(String(decoding: output.bytes, as: UTF8.self), "alice=pw1;bob=<secret>;")
        XCTAssertEqual(output.secretKeys, ["users.bob"])
    }
}
