// FoundationEssentials (no ICU), which propbusd links through DBus and PropBus, through the
// APIs they use (ProcessInfo, FileManager).
import FoundationEssentials

let cwd = FileManager.default.currentDirectoryPath
print("hello \(ProcessInfo.processInfo.environment.count >= 0 && !cwd.isEmpty)")
