import CommandLineKit
import Dispatch
import Glibc
import PropBus
import PropBusExec
import PropBusService
import PropBusSystem

// Before anything else, while this is the only thread: see HandledSignals.
HandledSignals.blockBeforeAnyThreadStarts()

// Not an option users see: scripts/install and the tests build propbusd(8) from DaemonOptions.
if CommandLine.arguments.dropFirst().elementsEqual(["--generate-man-page"]) {
    print(DaemonManPage.render(version: PropBusAPI.version), terminator: "")
    exit(0)
}

switch Result(catching: { try DaemonOptions.parse(Array(CommandLine.arguments.dropFirst())) }) {
case .success(.help):
    print(DaemonOptions.help)
case .success(.version):
    print("propbusd 0.1.0")
case .success(.run(let options)):
    // A command that closes its stdin early must cost a write error, not the daemon.
    signal(SIGPIPE, SIG_IGN)
    // A caller's big messages, once freed, must not stay in the daemon's RSS.
    LargeAllocations.returnToTheSystem()
    // First, while no other thread runs: it edits the environment.
    let notifier = SystemdNotifier.fromEnvironment()
    // Orphans of executions (a program that called setsid, then exited) come back to the
    // daemon instead of init, so that they can be ended with their execution.
    if !LeftoverProcesses.becomeSubreaper() {
        Log.info("cannot become a child subreaper (prctl: \(String(cString: strerror(errno)))); descendants that leave their process group may outlive their execution")
    }
    Daemon.launch(options: options, notifier: notifier)
    HandledSignals.parkMainThread()
case .failure(let error):
    // The same three lines as propctl: the problem, the usage line, where the help is.
    let text = (error as? UsageError).map { HelpGenerator(root: DaemonOptions.spec).errorText(for: $0) } ?? "propbusd: \(error)"
    Log.write(text + "\n")
    exit(64)
}
