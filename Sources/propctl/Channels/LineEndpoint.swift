import Dispatch
import Glibc
import PropBus
import SystemKit

/// A stream of lines: each line read is a local change, each bus value is written as a line.
/// Used for `--stdio` (propctl's own stdin and stdout) and `--exec` (a coprocess's stdout and
/// stdin).
///
/// A stream has no state to read back, so its current value is the last line that went
/// through it in either direction: what it said last, or what it was told last.
///
/// Confined to the channel's queue (see ``LocalEndpoint``); the reading thread hands every line
/// over to the queue.
final class LineEndpoint: LocalEndpoint {
    /// How a value is written on one line.
    enum Framing: Sendable {
        /// The text itself: simple for shell scripts, but a value cannot hold a newline.
        case lines
        /// One JSON string per line (`"a\nb"`): any text fits.
        case json
    }

    /// The longest line read by default (`--max-line`): any value the daemon takes by default
    /// (1 MiB, `--max-value-size`) fits, also as a JSON string (at most 6 bytes per byte).
    static let defaultMaximumLineLength = 8 << 20

    let label: String
    private let framing: Framing
    private let maximumLineLength: Int
    private let input: Int32
    private let output: Int32
    private let reads: Bool
    private let coprocess: pid_t?
    private var last: String?
    private var stopped = false
    private var changed: ((String?) -> Void)?
    private var ended: ((CommandFailure?) -> Void)?

    /// `reads` false leaves `input` alone, for `--direction from`.
    private init(label: String, input: Int32, output: Int32, reads: Bool, coprocess: pid_t?, framing: Framing, maximumLineLength: Int) {
        self.label = label
        self.framing = framing
        self.maximumLineLength = maximumLineLength
        self.input = input
        self.output = output
        self.reads = reads
        self.coprocess = coprocess
    }

    /// propctl's own stdin and stdout.
    static func standardStreams(reads: Bool, framing: Framing = .lines, maximumLineLength: Int = defaultMaximumLineLength) -> LineEndpoint {
        LineEndpoint(label: "stdio", input: STDIN_FILENO, output: STDOUT_FILENO, reads: reads, coprocess: nil, framing: framing,
                     maximumLineLength: maximumLineLength)
    }

    /// Starts `arguments` (a program and its arguments, looked up in PATH) with pipes on its stdin
    /// and stdout; its stderr is propctl's.
    static func coprocess(_ arguments: [String], reads: Bool, framing: Framing = .lines,
                          maximumLineLength: Int = defaultMaximumLineLength) throws(CommandFailure) -> LineEndpoint {
        guard case .success(let toChild) = Subprocess.pipe() else {
            throw CommandFailure(.dbusError, "cannot create pipes for --exec: \(Errno.current)")
        }
        guard case .success(let fromChild) = Subprocess.pipe() else {
            let failure = Errno.current
            close(toChild.read)
            close(toChild.write)
            throw CommandFailure(.dbusError, "cannot create pipes for --exec: \(failure)")
        }
        // propctl ignores SIGPIPE for itself; the coprocess gets the default back.
        let spawned = Subprocess.spawn(arguments, redirections: [(STDIN_FILENO, toChild.read), (STDOUT_FILENO, fromChild.write)],
                                       defaultSignals: [SIGPIPE])
        close(toChild.read)
        close(fromChild.write)
        let child: pid_t
        switch spawned {
        case .success(let pid): child = pid
        case .failure(let code):
            close(toChild.write)
            close(fromChild.read)
            throw CommandFailure(.usage, "cannot start \(arguments[0]) for --exec: \(code)")
        }
        return LineEndpoint(label: "coprocess \(arguments.joined(separator: " "))", input: fromChild.read, output: toChild.write,
                            reads: reads, coprocess: child, framing: framing, maximumLineLength: maximumLineLength)
    }

    func start(on queue: DispatchQueue, changed: @escaping (String?) -> Void,
               ended: @escaping (CommandFailure?) -> Void) throws(CommandFailure) {
        guard reads else { return }
        self.changed = changed
        self.ended = ended
        // A blocking reader on its own thread: no O_NONBLOCK is left on a terminal's stdin. It
        // takes the immutable settings along and hands every line over to the queue.
        let endpoint = LoopBound(self, on: queue)
        let input = input, maximumLineLength = maximumLineLength, coprocess = coprocess, label = label
        DetachedThread.start {
            var splitter = LineSplitter(maximumLength: maximumLineLength)
            var chunk = [UInt8](repeating: 0, count: 16 * 1024)
            while true {
                let count = chunk.withUnsafeMutableBytes { read(input, $0.baseAddress, $0.count) }
                if count < 0, errno == EINTR { continue }
                if count <= 0 { break }
                let events = chunk.withUnsafeBytes { splitter.append(UnsafeRawBufferPointer(rebasing: $0[..<count])) }
                if !events.isEmpty { queue.async { endpoint.value.received(events) } }
            }
            let rest = splitter.finish()
            let failure = coprocess.flatMap { Self.reap($0, label: label) }
            queue.async {
                let endpoint = endpoint.value
                endpoint.received(rest)
                if !endpoint.stopped { endpoint.ended?(failure) }
            }
        }
    }

    /// One line from the other side: its text, or why it is not text.
    private enum ReadLine {
        case text(String)
        case notText(TextBytes.Problem)
    }

    /// A line is text (UTF-8 without NUL) or refused: replacement characters would set a value
    /// the other side never wrote.
    private static func line(_ bytes: [UInt8]) -> ReadLine {
        var bytes = bytes[...]
        if bytes.last == UInt8(ascii: "\r") { bytes.removeLast() }
        if let problem = TextBytes.firstProblem(in: bytes) { return .notText(problem) }
        return .text(String(decoding: bytes, as: UTF8.self))
    }

    /// Waits for the coprocess after its stdout closed; a failure unless it exited with 0.
    private static func reap(_ child: pid_t, label: String) -> CommandFailure? {
        var status: Int32 = 0
        while waitpid(child, &status, 0) < 0, errno == EINTR {}
        let signal = status & 0x7f
        if signal != 0 { return CommandFailure(.dbusError, "the \(label) was killed by signal \(signal)") }
        let code = (status >> 8) & 0xff
        return code == 0 ? nil : CommandFailure(.dbusError, "the \(label) exited with status \(code)")
    }

    private func received(_ events: [LineSplitter.Event]) {
        for event in events where !stopped {
            guard case .line(let bytes) = event else {
                if case .tooLong(let length) = event {
                    Output.error("propctl bind: \(label): dropped a line of \(length) bytes, longer than \(maximumLineLength) bytes (--max-line)")
                }
                continue
            }
            let read = Self.line(bytes)
            guard case .text(let line) = read else {
                if case .notText(let problem) = read { Output.error("propctl bind: \(label): ignored a line that is not UTF-8 text (\(problem))") }
                continue
            }
            guard let text = decode(line) else {
                Output.error("propctl bind: \(label): ignored a line that is not one JSON string (--framing json): \(line.prefix(80))")
                continue
            }
            last = text
            changed?(text)
        }
    }

    private func decode(_ line: String) -> String? {
        switch framing {
        case .lines: return line
        case .json: return (try? JSONValue.parse(line))?.stringValue
        }
    }

    func current() -> String? { last }

    func write(_ text: String) throws(CommandFailure) -> Bool {
        last = text
        let line = framing == .json ? Output.json(.string(text)) : text
        let bytes = Array((line + "\n").utf8)
        var offset = 0
        while offset < bytes.count {
            let count = bytes[offset...].withUnsafeBytes { Glibc.write(output, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { throw CommandFailure(.dbusError, "cannot write to the \(label): \(String(cString: strerror(errno)))") }
            offset += count
        }
        return true
    }

    func deliverPending() {}

    var isBeingWritten: Bool { false }

    func whenQuiet(_ body: @escaping (String?) -> Void) { body(last) }

    var isIdle: Bool { true }

    func stop() {
        stopped = true
        if let coprocess {
            close(output)
            kill(coprocess, SIGTERM)
        }
    }
}
