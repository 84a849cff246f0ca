import Foundation
import XCTest

/// Completion scripts and man pages are generated from the specs behind `--help`: bash
/// completion really completes (subcommands, options, keys from the running daemon), and both
/// man pages render with `man -l`.
final class CompletionTests: DaemonTestCase {
    /// Runs the bash completion for the words of `line` (the last one being completed) in a
    /// fresh bash, as readline would: COMP_WORDS/COMP_CWORD, then the function `complete -p`
    /// names. Prints COMPREPLY one per line.
    private func complete(_ line: [String]) async throws -> [String] {
        let script = try await runCommand(BuildProducts.propctl, ["completion", "bash"], environment: bus.environment)
        XCTAssertEqual(script.status, 0, "\(script)")
        let directory = try makeTemporaryDirectory(prefix: "pbit-compl")
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("propctl.bash")
        try script.stdout.write(to: file, atomically: true, encoding: .utf8)
        let words = line.map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
        let program = """
            source '\(file.path)'
            spec=$(complete -p propctl) || exit 3
            function=${spec#*-F }; function=${function%% *}
            COMP_WORDS=(\(words)); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
            COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}
            "$function" propctl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
            printf '%s\\n' "${COMPREPLY[@]}"
            """
        var environment = bus.environment
        environment["PATH"] = BuildProducts.directory.path + ":" + (environment["PATH"] ?? "/usr/bin:/bin")
        let result = try await runCommand("/bin/bash", ["--norc", "-c", program], environment: environment)
        XCTAssertEqual(result.status, 0, "\(result)")
        return result.stdout.split(separator: "\n").map(String.init).filter { !$0.isEmpty }
    }

    func testBashCompletesSubcommandsOptionsAndKeysFromTheDaemon() async throws {
        try await client.create("settings.volume", "i", default: .int32(1))
        try await client.create("settings.theme", "s", default: .string(""))
        try await client.create("other.key", "b", default: .boolean(false))
        let subcommands = try await complete(["propctl", "de"])
        XCTAssertEqual(subcommands.sorted(), ["delete", "delete-command", "describe"])
        let options = try await complete(["propctl", "reset", "--rec"])
        XCTAssertEqual(options, ["--recursive"])
        let globals = try await complete(["propctl", "--js"])
        XCTAssertEqual(globals, ["--json"])
        // Keys come from the daemon on the bus named on the line being completed.
        let keys = try await complete(["propctl", "--address", bus.address, "get", "settings."])
        XCTAssertEqual(keys.sorted(), ["settings.theme", "settings.volume"])
        let shells = try await complete(["propctl", "completion", ""])
        XCTAssertEqual(shells, ["bash", "zsh", "fish"])
    }

    func testBashCompletesCommandKeysForExecAndCancel() async throws {
        try await client.createCommand("jobs.upper", ["exec": .array(of: .string, [.string("true")])])
        try await client.create("jobs.other", "i", default: .int32(0))
        let commands = try await complete(["propctl", "--address", bus.address, "cancel", "jobs."])
        XCTAssertEqual(commands, ["jobs.upper"])
    }

    // The zsh and fish scripts' content is pinned on the generator, in
    // PropctlTests.CodegenAndCompletionTests; zsh and fish themselves run in ShellCompletionTests.

    /// `man -l PAGE` as a user reads it, without a pager, at a fixed width.
    private func render(_ page: String) async throws -> String {
        let directory = try makeTemporaryDirectory(prefix: "pbit-man")
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("page")
        try page.write(to: file, atomically: true, encoding: .utf8)
        var environment = bus.environment
        environment["MANWIDTH"] = "80"
        environment["MAN_KEEP_FORMATTING"] = nil
        let result = try await runCommand("man", ["-P", "cat", "-l", file.path], environment: environment)
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertFalse(result.stderr.contains("warning"), result.stderr)
        return result.stdout
    }

    func testPropctlManPageRendersEverySubcommandAndOption() async throws {
        let page = try await runCommand(BuildProducts.propctl, ["--generate-man-page"], environment: bus.environment)
        XCTAssertEqual(page.status, 0, "\(page)")
        let text = try await render(page.stdout)
        for section in ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "COMMANDS", "EXAMPLES", "SEE ALSO"] {
            XCTAssertTrue(text.contains("\n\(section)\n"), "no \(section): \(text)")
        }
        for heading in ["get KEY...", "reset [OPTIONS] KEY|PREFIX", "create-command [OPTIONS] KEY [PROGRAM] [ARG...]",
                        "cancel KEY [ID]", "describe [OPTIONS] KEY", "completion SHELL"] {
            XCTAssertTrue(text.contains("   \(heading)\n"), "no \(heading) in:\n\(text)")
        }
        XCTAssertTrue(text.contains("--enabled-when EXPR"), text)
        XCTAssertTrue(text.contains("propbusd(8)"), text)
    }

    func testPropctlManPageHasExitStatusEnvironmentAndFiles() async throws {
        let page = try await runCommand(BuildProducts.propctl, ["--generate-man-page"], environment: bus.environment)
        let text = try await render(page.stdout)
        for section in ["EXIT STATUS", "ENVIRONMENT", "FILES"] {
            XCTAssertTrue(text.contains("\n\(section)\n"), "no \(section): \(text)")
        }
        for term in ["64", "69", "DBUS_SESSION_BUS_ADDRESS", "DBUS_SYSTEM_BUS_ADDRESS", "/run/dbus/system_bus_socket",
                     "/usr/share/bash-completion/completions/propctl"] {
            XCTAssertTrue(text.contains("\n       \(term)"), "no \(term) item: \(text)")
        }
        // --help says the same exit statuses, from the same entries.
        let help = try await runCommand(BuildProducts.propctl, ["--help"], environment: bus.environment)
        XCTAssertTrue(help.stdout.contains("Exit status:\n  0   success\n"), help.stdout)
    }

    func testPropbusdManPageListsEveryDaemonOption() async throws {
        let page = try await runCommand(BuildProducts.propbusd, ["--generate-man-page"], environment: bus.environment)
        XCTAssertEqual(page.status, 0, "\(page)")
        let text = try await render(page.stdout)
        let help = try await runCommand(BuildProducts.propbusd, ["--help"], environment: bus.environment)
        // Every option --help lists (from DaemonOptions' one table) is on the page.
        let options = help.stdout.split(separator: "\n").compactMap { line -> String? in
            let trimmed = line.drop { $0 == " " }
            guard trimmed.hasPrefix("--") else { return nil }
            return String(trimmed.prefix { $0 != " " && $0 != "," })
        }
        XCTAssertGreaterThan(options.count, 8, help.stdout)
        for option in options {
            XCTAssertTrue(text.contains(option), "propbusd(8) lacks \(option)")
        }
        XCTAssertTrue(text.contains("PROPBUSD(8)") && text.contains("propctl(1)"), text)
    }
}
