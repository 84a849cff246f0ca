import Dispatch
import Foundation

switch Result(catching: { try DaemonOptions.parse(Array(CommandLine.arguments.dropFirst())) }) {
case .success(.help):
    print(DaemonOptions.help)
case .success(.version):
    print("propbusd 0.1.0")
case .success(.run(let options)):
    let daemon = Daemon(options: options)
    daemon.openStore()
    Task { await daemon.start() }
    dispatchMain()
case .failure(let error):
    let message = (error as? DaemonOptions.UsageError)?.message ?? "\(error)"
    FileHandle.standardError.write(Data("propbusd: \(message)\nRun 'propbusd --help' for usage.\n".utf8))
    exit(64)
}
