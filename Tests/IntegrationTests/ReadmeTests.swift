import Foundation
import XCTest

/// Docs that never rot: every shell block of README.md, and the examples of
/// docs/expressions.md, run in order against a private bus and a real propbusd, and what a block
/// shows as output (`# ` lines right below a command) must be what the command prints.
///
/// Conventions of the documents (stated in README.md):
/// - a fenced `sh` block followed by `<!-- ReadmeTests: not run (why) -->` is skipped;
/// - a command's expected output (stdout and stderr together) is the run of `# ` lines right
///   below it; a comment after a blank line, or at the start of a block, is prose;
/// - outputs are compared with runs of blanks folded into one space, since `propctl list`
///   aligns columns on a terminal and separates them with tabs in a pipe;
/// - a command ending in `&` runs in the background, its output discarded; every background
///   job is killed at the end;
/// - `scripts/run -- ARGS` (the dev script, which builds and runs propbusd) is replaced by a
///   function that starts the test's propbusd with ARGS on the private bus and waits for it.
final class ReadmeTests: XCTestCase {
    private static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    /// One command of a block and the output the document shows for it.
    struct Step {
        var document: String
        var line: Int
        var command: String
        var expected: [String]
    }

    /// The steps of every runnable shell block of `markdown`, in order.
    static func steps(of markdown: String, document: String) -> [Step] {
        let lines = markdown.components(separatedBy: "\n")
        var steps: [Step] = []
        var index = 0
        while index < lines.count {
            guard lines[index].hasPrefix("```sh") else { index += 1; continue }
            var end = index + 1
            while end < lines.count, !lines[end].hasPrefix("```") { end += 1 }
            let after = lines.dropFirst(end + 1).first { !$0.trimmingCharacters(in: .whitespaces).isEmpty } ?? ""
            defer { index = end + 1 }
            if after.hasPrefix("<!-- ReadmeTests: not run") { continue }
            var current: Step?
            var continuing = false
            for number in (index + 1)..<end {
                let line = lines[number]
                if continuing, current != nil {
                    current!.command += "\n" + line
                    continuing = line.hasSuffix("\\")
                    continue
                }
                if line.trimmingCharacters(in: .whitespaces).isEmpty {
                    if let step = current { steps.append(step) }
                    current = nil
                } else if line.hasPrefix("#") {
                    // Output of the command above it; prose when there is none.
                    if current != nil { current!.expected.append(String(line.dropFirst(line.hasPrefix("# ") ? 2 : 1))) }
                } else {
                    if let step = current { steps.append(step) }
                    current = Step(document: document, line: number + 1, command: line, expected: [])
                    continuing = line.hasSuffix("\\")
                }
            }
            if let step = current { steps.append(step) }
        }
        return steps
    }

    /// Whether a command line runs in the background (`cmd &`, maybe with a trailing comment).
    static func isBackground(_ command: String) -> Bool {
        let code = command.range(of: " #").map { String(command[..<$0.lowerBound]) } ?? command
        return code.trimmingCharacters(in: .whitespaces).hasSuffix("&") && !code.hasSuffix("&&")
    }

    static func folded(_ text: String) -> String {
        text.split(whereSeparator: { $0 == " " || $0 == "\t" }).joined(separator: " ")
    }

    /// Runs `steps` in one bash, so that variables and files carry from block to block, with a
    /// marker before each step's output.
    private func run(_ steps: [Step], file: StaticString = #filePath, line: UInt = #line) async throws {
        let bus = try await PrivateBus.start(.session)
        let work = try makeTemporaryDirectory(prefix: "pbit-readme")
        defer { try? FileManager.default.removeItem(at: work) }
        // The documents' relative paths (examples/…) resolve as in a clone.
        try FileManager.default.createSymbolicLink(at: work.appendingPathComponent("examples"),
                                                   withDestinationURL: Self.packageRoot.appendingPathComponent("examples"))
        var script = #"""
            scripts/run() {
              local args=()
              while [ $# -gt 0 ]; do if [ "$1" = -- ]; then shift; args=("$@"); break; fi; shift; done
              propbusd --address "$DBUS_SESSION_BUS_ADDRESS" --state-dir "$PWD/state" "${args[@]}" > propbusd.log 2>&1 &
              for _ in $(seq 400); do propctl status > /dev/null 2>&1 && return 0; sleep 0.025; done
              echo "propbusd did not start: $(cat propbusd.log)"; return 1
            }

            """#
        for (number, step) in steps.enumerated() {
            script += "printf '\\n@@STEP \(number)@@\\n'\n"
            if Self.isBackground(step.command) {
                script += "{ \(step.command)\n} > /dev/null 2>&1\n"
            } else {
                script += "{ \(step.command)\n} 2>&1\n"
            }
        }
        script += "printf '\\n@@END@@\\n'\nkill $(jobs -p) 2> /dev/null\nwait 2> /dev/null\n"
        let scriptURL = work.appendingPathComponent("readme.sh")
        try script.write(to: scriptURL, atomically: true, encoding: .utf8)

        var environment = bus.environment
        environment["PATH"] = BuildProducts.directory.path + ":" + (environment["PATH"] ?? "/usr/bin:/bin")
        environment["HOME"] = work.path
        environment["XDG_CONFIG_HOME"] = work.appendingPathComponent("config").path
        environment["XDG_STATE_HOME"] = work.appendingPathComponent("state-home").path
        environment["LC_ALL"] = "C.UTF-8"
        // The tour's scratch directory (mktemp -d) goes in the work directory too.
        environment["TMPDIR"] = work.path
        let before = Set((try? FileManager.default.contentsOfDirectory(atPath: work.path)) ?? [])
        // bash -c cd …: the documents' relative paths resolve in the work directory.
        let result = try await runCommand("/bin/bash", ["-c", "cd \"$1\" && exec bash readme.sh", "bash", work.path],
                                          environment: environment, timeout: 120)
        XCTAssertTrue(result.stdout.contains("@@END@@"), "the blocks did not run to the end: \(result)", file: file, line: line)
        var outputs: [Int: String] = [:]
        for chunk in result.stdout.components(separatedBy: "\n@@STEP ").dropFirst() {
            guard let close = chunk.range(of: "@@\n") else { continue }
            let number = Int(chunk[..<close.lowerBound]) ?? -1
            var text = String(chunk[close.upperBound...])
            if let end = text.range(of: "\n@@END@@") { text = String(text[..<end.lowerBound]) }
            outputs[number] = text
        }
        // A user runs the tour in a clone: it must leave no file there (the scratch directory
        // it makes with mktemp -d holds them; state, log and script are this test's stand-ins).
        let made = Set((try? FileManager.default.contentsOfDirectory(atPath: work.path)) ?? []).subtracting(before)
            .subtracting(["readme.sh", "propbusd.log", "state", "config", "state-home"]).filter { !$0.hasPrefix("tmp.") }
        XCTAssertEqual(made.sorted(), [], "the blocks left files in the clone", file: file, line: line)
        for (number, step) in steps.enumerated() where !step.expected.isEmpty {
            let printed = (outputs[number] ?? "").split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
                .filter { !$0.isEmpty }.map(Self.folded)
            XCTAssertEqual(printed, step.expected.map(Self.folded),
                           "\(step.document):\(step.line): `\(step.command)` printed something else", file: file, line: line)
        }
    }

    private func document(_ path: String) throws -> String {
        try String(contentsOf: Self.packageRoot.appendingPathComponent(path), encoding: .utf8)
    }

    func testEveryShellBlockOfTheReadmeRunsAndPrintsWhatItShows() async throws {
        let steps = Self.steps(of: try document("README.md"), document: "README.md")
        XCTAssertGreaterThan(steps.count, 40, "the README's blocks were not found")
        XCTAssertGreaterThan(steps.filter { !$0.expected.isEmpty }.count, 15)
        try await run(steps)
    }

    func testTheExamplesOfTheExpressionsPageRun() async throws {
        let text = try document("docs/expressions.md")
        // The page starts the daemon in prose ("scripts/run in a clone"): start it first.
        let start = Step(document: "docs/expressions.md", line: 0, command: "scripts/run", expected: [])
        let steps = Self.steps(of: text, document: "docs/expressions.md")
        XCTAssertGreaterThan(steps.filter { !$0.expected.isEmpty }.count, 3)
        try await run([start] + steps)
    }

    func testTheConventionsAreReadAsDocumented() {
        let markdown = """
            ```sh
            # prose at the start
            echo a \\
                b
            # a b

            # prose after a blank line
            sleep 1 &   # background
            ```

            ```sh
            echo skipped
            ```
            <!-- ReadmeTests: not run (reason) -->
            """
        let steps = Self.steps(of: markdown, document: "t")
        XCTAssertEqual(steps.map(\.command), ["echo a \\\n    b", "sleep 1 &   # background"])
        XCTAssertEqual(steps.map(\.expected), [["a b"], []])
        XCTAssertEqual(steps.map { Self.isBackground($0.command) }, [false, true])
        XCTAssertFalse(Self.isBackground("a && b"))
    }
}
