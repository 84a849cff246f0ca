import CommandLineKit
import Glibc
import PropBus

// propctl: parse with the declarative spec, run one subcommand, exit with its codes (0, 1 for a
// D-Bus error, 64 usage, 69 service unavailable: ``CommandFailure/ExitCode``).
let parser = CommandLineParser(root: PropctlSpec.root)

// Not an option users see: scripts/install and the tests build propctl(1) from the same spec.
if CommandLine.arguments.dropFirst().elementsEqual(["--generate-man-page"]) {
    print(ManPage(root: PropctlSpec.root, version: PropBusAPI.version, seeAlso: ["propbusd(8)", "busctl(1)", "gsettings(1)"]).render(), terminator: "")
    exit(0)
}
let help = HelpGenerator(root: PropctlSpec.root)

let result: ParseResult
do {
    result = try parser.parse(CommandLine.arguments.dropFirst())
} catch {
    Output.error(help.errorText(for: error))
    exit(CommandFailure.ExitCode.usage.rawValue)
}

switch result {
case .help(let path):
    Output.line(help.help(for: path))
case .version:
    Output.line("propctl 0.1.0")
case .command(let parsed):
    guard let name = parsed.subcommand, let command = Subcommands.all[name] else {
        Output.error(help.help(for: []))
        exit(CommandFailure.ExitCode.usage.rawValue)
    }
    do {
        // A one-shot `get` stays on this thread with blocking calls: no task, queue or thread.
        if name == "get", try GetVerb.runBlocking(parsed) { exit(0) }
        try await command.run(parsed)
    } catch {
        Output.error("propctl \(name): " + (error.isNotRunning ? CommandFailure.notRunning(on: PropbusClient.bus(parsed)) : error.message))
        exit(error.code.rawValue)
    }
}
exit(0)
