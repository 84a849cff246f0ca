import Glibc
import PropBus
import SystemKit

/// What history records of a caller's process, read from `/proc/PID` at the time of the call
/// (a process that has exited or is not visible leaves the fields empty).
public enum CallerProcess {
    /// `caller` with its user name, `comm`, `exe` and systemd unit filled in.
    public static func describe(_ caller: WriteSet.Caller) -> WriteSet.Caller {
        var caller = caller
        if let uid = caller.userID { caller.userName = userName(of: uid) }
        guard let pid = caller.processID else { return caller }
        if let comm = try? FileSystem.contents(of: "/proc/\(pid)/comm") {
            caller.command = String(decoding: comm, as: UTF8.self).split(separator: "\n").first.map(String.init)
        }
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink("/proc/\(pid)/exe", &buffer, buffer.count - 1)
        if count > 0 { caller.executable = String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self) }
        if let cgroup = try? FileSystem.contents(of: "/proc/\(pid)/cgroup") { caller.unit = unit(inCgroup: String(decoding: cgroup, as: UTF8.self)) }
        return caller
    }

    /// The systemd unit (`NAME.service`, `NAME.scope`) named last in a `/proc/PID/cgroup` text.
    public static func unit(inCgroup text: String) -> String? {
        for line in text.split(separator: "\n") {
            // cgroup v2: "0::/system.slice/foo.service"; v1 lines name the systemd hierarchy.
            guard line.hasPrefix("0::") || line.contains(":name=systemd:") else { continue }
            let path = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false).last ?? ""
            if let unit = path.split(separator: "/").last(where: { $0.hasSuffix(".service") || $0.hasSuffix(".scope") }) { return String(unit) }
        }
        return nil
    }

    /// The user name of `uid` from the password database (`getpwuid_r`).
    public static func userName(of uid: UInt32) -> String? {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, result != nil, let name = entry.pw_name else { return nil }
        return String(cString: name)
    }
}
