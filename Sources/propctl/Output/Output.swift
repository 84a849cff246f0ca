import Glibc
import PropBus
import SystemKit

/// Writes propctl's output, one flushed line at a time so pipes see changes as they happen.
enum Output {
    /// Writes `text` and a newline to stdout, then flushes.
    static func line(_ text: String) {
        write(text + "\n", to: .standardOutput)
    }

    /// Writes to stderr.
    static func error(_ text: String) {
        write(text + "\n", to: .standardError)
    }

    /// Writes `text` to `descriptor` unbuffered, so the order of stdout and stderr lines is the
    /// order they were written in. A reader that went away is not an error worth reporting
    /// on the stream that failed: propctl goes on (or SIGPIPE ends it, where not ignored).
    static func write(_ text: String, to descriptor: FileDescriptor) {
        try? descriptor.writeAll(text)
    }

    /// `text` followed by blanks up to `width` characters.
    static func padded(_ text: String, to width: Int) -> String {
        let count = text.count
        return count >= width ? text : text + String(repeating: " ", count: width - count)
    }

    /// Whether stdout is a terminal: tables are aligned only there.
    static var isTerminal: Bool { isatty(STDOUT_FILENO) != 0 }

    /// Renders rows as an aligned table under `header` on a terminal, tab-separated without it
    /// otherwise.
    static func table(header: [String], rows: [[String]]) -> String {
        guard isTerminal else { return tabSeparated(rows) }
        let all = [header] + rows
        let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
        return all.map { row in
            let line = row.enumerated().map { index, cell in
                index == row.count - 1 ? cell : padded(cell, to: widths[index])
            }.joined(separator: "  ")
            // An empty last column (list's modified marker) leaves no trailing blanks.
            return String(line.reversed().drop { $0 == " " }.reversed())
        }.joined(separator: "\n")
    }

    /// Rows as lines of tab-separated cells. Empty cells at the end of a row are left out (list's
    /// empty modified marker): a line never ends with a tab, and `cut -f3` still finds the third.
    static func tabSeparated(_ rows: [[String]]) -> String {
        rows.map { row in
            var cells = row[...]
            while cells.count > 1, cells.last?.isEmpty == true { cells = cells.dropLast() }
            return cells.joined(separator: "\t")
        }.joined(separator: "\n")
    }

    /// Serializes a JSON document on one line.
    static func json(_ value: JSONValue) -> String { value.serialized(pretty: false) }
}
