import Foundation

/// A datagram socket standing in for systemd's notify socket: a daemon started with
/// ``notifySocket`` as `NOTIFY_SOCKET` sends its sd_notify(3) messages here.
///
/// `@unchecked Sendable`: `received` is only touched under `lock`; the descriptor is only read.
final class NotifySocket: @unchecked Sendable {
    /// The value for `NOTIFY_SOCKET`: a path, or `@name` for an abstract socket.
    let notifySocket: String
    private let fd: Int32
    private let directory: URL?
    private let lock = NSLock()
    private var received: [String] = []

    /// Binds a socket in a fresh temporary directory, or in the abstract namespace.
    init(abstract: Bool = false) throws {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TestSetupError("socket: errno \(errno)") }
        let name: String
        if abstract {
            directory = nil
            name = "propbus-test-notify-\(getpid())-\(UInt32.random(in: 0 ... .max))"
        } else {
            let directory = try makeTemporaryDirectory(prefix: "pbit-notify")
            self.directory = directory
            name = directory.appendingPathComponent("notify").path
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(name.utf8)
        // An abstract name starts with a NUL byte instead of '@'.
        let offset = abstract ? 1 : 0
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            for (index, byte) in bytes.enumerated() { buffer[index + offset] = byte }
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + offset + bytes.count + (abstract ? 0 : 1))
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard bound == 0 else {
            close(fd)
            throw TestSetupError("bind \(name): errno \(errno)")
        }
        self.fd = fd
        notifySocket = abstract ? "@" + name : name
    }

    deinit {
        close(fd)
        if let directory { try? FileManager.default.removeItem(at: directory) }
    }

    /// Every message received so far, in order.
    var messages: [String] {
        // Under the lock, so two readers cannot append out of order.
        lock.lock()
        defer { lock.unlock() }
        drain()
        return received
    }

    /// Waits until `condition` holds for the messages received so far; returns them either way.
    @discardableResult
    func wait(timeout: TimeInterval = 10, until condition: ([String]) -> Bool) async -> [String] {
        let deadline = Date().addingTimeInterval(timeout)
        while !condition(messages), Date() < deadline {
            try? await Task.sleep(nanoseconds: 1_000_000)
        }
        return messages
    }

    /// Waits for a message that has `assignment` (e.g. `READY=1`) as one of its lines.
    @discardableResult
    func wait(for assignment: String, timeout: TimeInterval = 10) async -> [String] {
        await wait(timeout: timeout) { $0.contains { Self.lines($0).contains(assignment) } }
    }

    /// The assignments of one message, e.g. `["READY=1", "STATUS=…"]`.
    static func lines(_ message: String) -> [String] {
        message.split(separator: "\n").map(String.init)
    }

    /// Reads every waiting datagram; call under `lock`.
    private func drain() {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { return }
            received.append(String(decoding: buffer[0 ..< count], as: UTF8.self))
        }
    }
}
