// Full Foundation (with ICU), through the APIs propctl uses today (FileHandle, Data,
// Date.formatted, padding), so that a static link pulls in what propctl's would.
import Foundation

let line = "hello \(Date().formatted(.iso8601).count > 0)".padding(toLength: 12, withPad: " ", startingAt: 0)
FileHandle.standardOutput.write(Data((line + "\n").utf8))
