import FoundationEssentials
import Glibc

/// Sends sd_notify(3) datagrams to `$NOTIFY_SOCKET`, without linking libsystemd.
enum SystemdNotifier {
    /// Sends `state` (e.g. `READY=1`); a no-op when not started by systemd.
    static func notify(_ state: String) {
        guard var path = ProcessInfo.processInfo.environment["NOTIFY_SOCKET"], !path.isEmpty else { return }
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return }
        defer { close(fd) }
        // A leading '@' names an abstract socket: a NUL byte on the wire.
        let abstract = path.hasPrefix("@")
        if abstract { path.removeFirst() }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let pathBytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard pathBytes.count + 1 < capacity else { return }
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            let offset = abstract ? 1 : 0
            for (i, byte) in pathBytes.enumerated() { buffer[i + offset] = byte }
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + pathBytes.count + (abstract ? 1 : 0))
        _ = state.withCString { text in
            withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, text, strlen(text), Int32(MSG_NOSIGNAL), $0, length)
                }
            }
        }
    }
}
