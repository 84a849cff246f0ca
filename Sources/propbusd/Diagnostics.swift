import Glibc

/// Messages for the journal, written straight to file descriptor 2.
enum Diagnostics {
    /// Writes `text` (which ends with a newline) to stderr with one `write(2)`, unbuffered, so
    /// it is not lost when the daemon exits right after.
    static func write(_ text: String) {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeMutableBytes { Glibc.write(2, $0.baseAddress! + offset, $0.count - offset) }
            guard written > 0 else { return }
            offset += written
        }
    }
}
