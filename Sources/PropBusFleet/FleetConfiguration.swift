import Etcd
import Glibc
import PropBus
import SystemKit

/// Where the fleet's etcd is and how to reach it: `--fleet etcd://HOST:PORT[,HOST:PORT…]/PREFIX`
/// (`etcds://` for TLS), `--fleet-ca FILE`, `--fleet-cert FILE --fleet-key FILE`,
/// `--fleet-credentials FILE`.
public struct FleetConfiguration: Sendable, Equatable {
    /// The members, `host:port` each.
    public var members: [String]
    /// The etcd key prefix every fleet key lives under: `/PREFIX/`.
    public var prefix: String
    /// Whether the members speak https (`etcds://`, or a CA file given).
    public var tls: Bool
    /// `--fleet-ca`: the CA that signed the members' certificates.
    public var caFile: String?
    /// `--fleet-cert`: this host's client certificate, for members that require one.
    public var certFile: String?
    /// `--fleet-key`: the private key of ``certFile``; not readable by everyone.
    public var keyFile: String?
    /// `--fleet-credentials`: a file holding `USER:PASSWORD` on its first line.
    public var credentialsFile: String?
    /// This host's name in `PREFIX/hosts/` (the host name unless `--fleet-host`).
    public var hostName: String

    /// Reads `etcd://HOST:PORT[,HOST:PORT…]/PREFIX` (or `etcds://…`).
    public static func parse(_ url: String) throws(FleetConfigurationError) -> FleetConfiguration {
        let tls: Bool
        let rest: Substring
        if url.hasPrefix("etcd://") {
            (tls, rest) = (false, url.dropFirst("etcd://".count))
        } else if url.hasPrefix("etcds://") {
            (tls, rest) = (true, url.dropFirst("etcds://".count))
        } else {
            throw FleetConfigurationError("--fleet expects etcd://HOST:PORT[,HOST:PORT…]/PREFIX (or etcds:// for TLS), got '\(url)'")
        }
        guard let slash = rest.firstIndex(of: "/") else {
            throw FleetConfigurationError("--fleet '\(url)' has no /PREFIX after the members, e.g. etcd://127.0.0.1:2379/propbus")
        }
        let prefix = rest[rest.index(after: slash)...].split(separator: "/").joined(separator: "/")
        guard !prefix.isEmpty else {
            throw FleetConfigurationError("--fleet '\(url)' has an empty PREFIX; name one, e.g. etcd://127.0.0.1:2379/propbus")
        }
        var members: [String] = []
        for member in rest[..<slash].split(separator: ",", omittingEmptySubsequences: false) {
            guard let colon = member.lastIndex(of: ":"), colon != member.startIndex,
                  let port = Int(member[member.index(after: colon)...]), (1...65535).contains(port) else {
                throw FleetConfigurationError("--fleet member '\(member)' of '\(url)' is not HOST:PORT")
            }
            members.append(String(member))
        }
        return FleetConfiguration(members: members, prefix: "/" + prefix + "/", tls: tls, caFile: nil,
                                  certFile: nil, keyFile: nil, credentialsFile: nil, hostName: Self.localHostName())
    }

    /// The members' URLs for ``EtcdClient``.
    public var endpoints: [String] { members.map { (tls || caFile != nil || certFile != nil ? "https://" : "http://") + $0 } }

    /// The client's options: the CA, and the credentials read from their file, which must not be
    /// readable by everyone (it holds a password).
    public func etcdOptions() throws(FleetConfigurationError) -> EtcdOptions {
        var options = EtcdOptions()
        options.caFile = caFile
        options.certFile = certFile
        if let keyFile {
            try Self.requireNotWorldReadable(keyFile, option: "--fleet-key", holding: "a private key")
            options.keyFile = keyFile
        }
        if let credentialsFile {
            try Self.requireNotWorldReadable(credentialsFile, option: "--fleet-credentials", holding: "a password")
            let bytes: [UInt8]
            do { bytes = try FileSystem.contents(of: credentialsFile) } catch {
                throw FleetConfigurationError("cannot read --fleet-credentials \(credentialsFile): \(error)")
            }
            let line = String(decoding: bytes, as: UTF8.self).split(separator: "\n").first.map(String.init) ?? ""
            guard let colon = line.firstIndex(of: ":"), colon != line.startIndex else {
                throw FleetConfigurationError("--fleet-credentials \(credentialsFile) must hold USER:PASSWORD on its first line")
            }
            options.credentials = .init(user: String(line[..<colon]), password: String(line[line.index(after: colon)...]))
        }
        return options
    }

    /// Refuses a secret's file that everyone may read.
    private static func requireNotWorldReadable(_ file: String, option: String, holding secret: String) throws(FleetConfigurationError) {
        var info = stat()
        guard stat(file, &info) == 0 else {
            throw FleetConfigurationError("cannot read \(option) \(file): \(String(cString: strerror(errno)))")
        }
        guard info.st_mode & 0o004 == 0 else {
            throw FleetConfigurationError("\(option) \(file) is readable by everyone (mode \(String(info.st_mode & 0o777, radix: 8))); it holds \(secret): chmod 0600 (or 0640 with group propbus)")
        }
    }

    /// `gethostname(2)`.
    public static func localHostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "localhost" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// A `--fleet*` option that cannot be used.
public struct FleetConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
