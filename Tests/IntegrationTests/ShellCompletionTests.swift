import Foundation
import XCTest

/// The completions as users meet them: bash fed a line split the way readline splits it (at
/// `:` and `=` too), zsh and fish typed into through tmux, with the scripts where Debian's
/// shells look for them.
final class ShellCompletionTests: DaemonTestCase {
    override func setUp() async throws {
        try await super.setUp()
        try await client.create("settings.volume", "i", default: .int32(1))
        try await client.create("settings.theme", "s", default: .string(""))
        try await client.createCommand("jobs.upper", ["exec": .array(of: .string, [.string("true")])])
    }

    private var shellEnvironment: [String: String] {
        var environment = bus.environment
        // No bus but the one named on the line: a key offered proves the line's --address was used.
        environment["DBUS_SESSION_BUS_ADDRESS"] = "unix:path=/nonexistent/propbus-completion"
        environment["PATH"] = BuildProducts.directory.path + ":/usr/bin:/bin"
        return environment
    }

    private func script(_ shell: String) async throws -> String {
        let result = try await runCommand(BuildProducts.propctl, ["completion", shell], environment: bus.environment)
        XCTAssertEqual(result.status, 0, "\(result)")
        return result.stdout
    }

    /// `line` split as readline splits it with bash's default COMP_WORDBREAKS: at blanks, and
    /// a run of `:` or `=` is a word of its own.
    private func readlineWords(_ line: String) -> [String] {
        var words: [String] = []
        for blank in line.split(separator: " ", omittingEmptySubsequences: false) {
            var current = "", breaking = false
            for character in blank {
                let isBreak = character == ":" || character == "="
                if !current.isEmpty && isBreak != breaking { words.append(current); current = "" }
                current.append(character)
                breaking = isBreak
            }
            words.append(current)
        }
        return words
    }

    /// What bash offers for `line` (the cursor at its end), through the function `complete -p`
    /// names, with COMP_WORDS/COMP_CWORD/COMP_LINE/COMP_POINT as readline sets them.
    private func bash(_ line: String) async throws -> [String] {
        let directory = try makeTemporaryDirectory(prefix: "pbit-compl")
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("propctl.bash")
        try await script("bash").write(to: file, atomically: true, encoding: .utf8)
        func quoted(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'" }
        let words = readlineWords(line)
        let program = """
            source '\(file.path)'
            spec=$(complete -p propctl) || exit 3
            function=${spec#*-F }; function=${function%% *}
            COMP_WORDS=(\(words.map(quoted).joined(separator: " "))); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
            COMP_LINE=\(quoted(line)); COMP_POINT=${#COMP_LINE}
            "$function" propctl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
            printf '%s\\n' "${COMPREPLY[@]}"
            """
        let result = try await runCommand("/bin/bash", ["--norc", "-c", program], environment: shellEnvironment)
        XCTAssertEqual(result.status, 0, "\(result)")
        return result.stdout.split(separator: "\n").map(String.init).filter { !$0.isEmpty }.sorted()
    }

    func testBashOffersKeysOnlyWhereAKeyGoes() async throws {
        let at = "propctl --address \(bus.address)"
        let keys = try await bash("\(at) get settings.")
        XCTAssertEqual(keys, ["settings.theme", "settings.volume"], "--address unix:path=… split at : and =")
        let more = try await bash("\(at) get settings.theme settings.v")
        XCTAssertEqual(more, ["settings.volume"], "get takes several keys")
        let value = try await bash("\(at) set settings.volume settings.")
        XCTAssertEqual(value, [], "a VALUE is not a key")
        let input = try await bash("\(at) exec jobs.upper jobs.")
        XCTAssertEqual(input, [], "a command's INPUT is not a key")
        let type = try await bash("\(at) create settings.new settings.")
        XCTAssertEqual(type, [], "create's KEY is new, its TYPE is not a key")
        let command = try await bash("\(at) exec jobs.")
        XCTAssertEqual(command, ["jobs.upper"])
        let to = try await bash("\(at) bind settings.theme --to settings.v")
        XCTAssertEqual(to, ["settings.volume"], "--to takes a key")
        let afterTo = try await bash("\(at) bind settings.theme --to settings.volume --dir")
        XCTAssertEqual(afterTo, ["--direction"])
    }

    func testBashOffersTheFixedChoicesOfOptionsAndPositionals() async throws {
        let format = try await bash("propctl dump --format ")
        XCTAssertEqual(format, ["json", "lines"])
        let formatEquals = try await bash("propctl dump --format=l")
        XCTAssertEqual(formatEquals, ["lines"], "--format=VALUE: the word after = is completed")
        let direction = try await bash("propctl bind k --to j --direction ")
        XCTAssertEqual(direction, ["both", "from", "to"])
        let framing = try await bash("propctl bind k --stdio --framing j")
        XCTAssertEqual(framing, ["json"])
        let scope = try await bash("propctl create k i --scope ")
        XCTAssertEqual(scope, ["fleet", "local"])
        let field = try await bash("propctl describe k --field writa")
        XCTAssertEqual(field, ["writable"])
        let shells = try await bash("propctl completion ")
        XCTAssertEqual(shells, ["bash", "fish", "zsh"])
        let address = try await bash("propctl --address unix:path=/run/x ")
        XCTAssertTrue(address.contains("get") && address.contains("list"), "after --address VALUE, the subcommands: \(address)")
    }

    func testBashOffersRenderActionsAndTheDaemonsRenders() async throws {
        let model = bus.directory.appendingPathComponent("renders.json")
        try #"{"renders": {"site": {"template_text": "x", "destination": "\#(bus.directory.path)/site.conf"}, "sitemap": {"template_text": "y", "destination": "\#(bus.directory.path)/sitemap.xml"}}}"#
            .write(to: model, atomically: true, encoding: .utf8)
        try await restartDaemon(arguments: ["--model", model.path])
        let action = try await bash("propctl render p")
        XCTAssertEqual(action, ["preview"])
        let names = try await bash("propctl --address \(bus.address) render show si")
        XCTAssertEqual(names, ["site", "sitemap"], "the renders are asked of the daemon on the line's bus")
    }

    // MARK: zsh and fish in a terminal

    /// A shell in a tmux session of its own, typed into as a user types.
    private struct Terminal: Sendable {
        let socket: String
        let directory: URL

        init(_ command: [String], environment: [String: String], directory: URL) async throws {
            self.directory = directory
            socket = directory.appendingPathComponent("tmux").path
            let exports = environment.map { "\($0.key)=\($0.value)" }
            let result = try await runCommand("/usr/bin/tmux", ["-S", socket, "-f", "/dev/null", "new-session", "-d", "-x", "200", "-y", "50",
                                                                "/usr/bin/env", "-i"] + exports + command, environment: environment)
            guard result.status == 0 else { throw TestSetupError("tmux did not start: \(result)") }
        }

        func send(_ keys: String...) async throws {
            let result = try await runCommand("/usr/bin/tmux", ["-S", socket, "send-keys", "-t", "0"] + keys, environment: [:])
            guard result.status == 0 else { throw TestSetupError("tmux send-keys: \(result)") }
        }

        func screen() async throws -> String {
            try await runCommand("/usr/bin/tmux", ["-S", socket, "capture-pane", "-p", "-t", "0"], environment: [:]).stdout
        }

        /// Waits until the screen shows `text` (or 10 s pass), and returns the screen.
        @discardableResult
        func waitFor(_ text: String) async throws -> String {
            var last = ""
            for _ in 0..<100 {
                last = try await screen()
                if last.contains(text) { return last }
                try await Task.sleep(nanoseconds: 100_000_000)
            }
            return last
        }

        func close() async {
            _ = try? await runCommand("/usr/bin/tmux", ["-S", socket, "kill-server"], environment: [:])
        }
    }

    private func requireTools(_ tools: [String]) throws {
        for tool in tools where !FileManager.default.isExecutableFile(atPath: "/usr/bin/" + tool) {
            throw XCTSkip("\(tool) is not installed (scripts/setup installs it)")
        }
    }

    func testZshCompletesOnTheFirstTabFromTheVendorDirectory() async throws {
        try requireTools(["zsh", "tmux"])
        let directory = try makeTemporaryDirectory(prefix: "pbit-zsh")
        defer { try? FileManager.default.removeItem(at: directory) }
        // Where the package puts it; Debian's zsh has /usr/share/zsh/vendor-completions on fpath.
        let vendor = directory.appendingPathComponent("usr/share/zsh/vendor-completions")
        try FileManager.default.createDirectory(at: vendor, withIntermediateDirectories: true)
        try await script("zsh").write(to: vendor.appendingPathComponent("_propctl"), atomically: true, encoding: .utf8)
        let rc = "fpath=(\(vendor.path) $fpath)\nautoload -Uz compinit && compinit -u -d \(directory.path)/zcompdump\nPS1='zsh> '\n"
        try rc.write(to: directory.appendingPathComponent(".zshrc"), atomically: true, encoding: .utf8)
        var environment = shellEnvironment
        environment["ZDOTDIR"] = directory.path
        environment["HOME"] = directory.path
        environment["TERM"] = "xterm"
        let terminal = try await Terminal(["/usr/bin/zsh", "-i"], environment: environment, directory: directory)
        do { try await typeIntoZsh(terminal) } catch { await terminal.close(); throw error }
        await terminal.close()
    }

    private func typeIntoZsh(_ terminal: Terminal) async throws {
        try await terminal.waitFor("zsh> ")
        // The first Tab of the session.
        try await terminal.send("propctl --address \(bus.address) descr", "Tab")
        // (capture-pane drops the blank the completion adds after the word.)
        let screen = try await terminal.waitFor(" describe")
        XCTAssertTrue(screen.contains(" describe"), "the first Tab did nothing:\n\(screen)")
        try await terminal.send("C-u", "propctl --address \(bus.address) describe settings.vo", "Tab")
        let keys = try await terminal.waitFor("settings.volume")
        XCTAssertTrue(keys.contains("describe settings.volume"), "no key from the --address bus:\n\(keys)")
    }

    func testFishCompletesKeysFromTheBusOnTheLine() async throws {
        try requireTools(["fish", "tmux"])
        let directory = try makeTemporaryDirectory(prefix: "pbit-fish")
        defer { try? FileManager.default.removeItem(at: directory) }
        // A vendor directory of fish's (XDG_DATA_DIRS/fish/vendor_completions.d), read by its own
        // config.fish; HOME and XDG_CONFIG_HOME empty, so no user configuration.
        let vendor = directory.appendingPathComponent("share/fish/vendor_completions.d")
        try FileManager.default.createDirectory(at: vendor, withIntermediateDirectories: true)
        try await script("fish").write(to: vendor.appendingPathComponent("propctl.fish"), atomically: true, encoding: .utf8)
        var environment = shellEnvironment
        environment["HOME"] = directory.path
        environment["XDG_CONFIG_HOME"] = directory.appendingPathComponent("config").path
        environment["XDG_DATA_DIRS"] = directory.appendingPathComponent("share").path + ":/usr/share"
        environment["TERM"] = "xterm"
        let terminal = try await Terminal(["/usr/bin/fish", "-i", "-C", "function fish_prompt; echo 'fish> '; end; set -g fish_greeting"],
                                          environment: environment, directory: directory)
        do { try await typeIntoFish(terminal) } catch { await terminal.close(); throw error }
        await terminal.close()
    }

    private func typeIntoFish(_ terminal: Terminal) async throws {
        try await terminal.waitFor("fish> ")
        try await terminal.send("propctl --address \(bus.address) get settings.vo", "Tab")
        let keys = try await terminal.waitFor("settings.volume")
        XCTAssertTrue(keys.contains("get settings.volume"), "no key from the --address bus:\n\(keys)")
        try await terminal.send("C-u", "propctl --address \(bus.address) set settings.volume settings.", "Tab")
        let value = try await terminal.waitFor("settings.")
        XCTAssertFalse(value.contains("settings.theme"), "a VALUE completed as a key:\n\(value)")
    }
}
