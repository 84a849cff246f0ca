import Foundation

/// Loopback TCP ports nobody listens on, found by binding port 0 (all sockets are held until
/// every port is chosen, so the ports differ).
public enum FreePorts {
    public static func take(_ count: Int) throws -> [Int] {
        var sockets: [Int32] = []
        defer { sockets.forEach { close($0) } }
        var ports: [Int] = []
        for _ in 0..<count {
            let (fd, port) = try bound()
            sockets.append(fd)
            ports.append(port)
        }
        return ports
    }

    /// A socket bound to a free loopback port (not listening), and the port.
    public static func bound() throws -> (Int32, Int) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw EtcdClusterError("socket: errno \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { close(fd); throw EtcdClusterError("bind: errno \(errno)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }

    /// A loopback listener that never accepts: connections complete in the kernel's backlog, and
    /// requests sent on them are never answered (a member that hangs).
    public static func silentListener() throws -> (fd: Int32, port: Int) {
        let (fd, port) = try bound()
        guard listen(fd, 16) == 0 else { close(fd); throw EtcdClusterError("listen: errno \(errno)") }
        return (fd, port)
    }
}
