import Glibc

/// The process environment, read from the C library's `environ`.
public enum Environment {
    /// Every variable, as `ProcessInfo.environment` gave it: a later duplicate name wins.
    public static var current: [String: String] {
        var variables: [String: String] = [:]
        var cursor = environ
        while let entry = cursor.pointee {
            let text = String(cString: entry)
            if let equals = text.firstIndex(of: "=") {
                variables[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            cursor += 1
        }
        return variables
    }

    /// One variable (`getenv(3)`), or nil when it is not set.
    public static func value(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }

    /// `$HOME` in `environment`, else the user's home directory from the password database
    /// (`getpwuid`), else `/`.
    public static func home(in environment: [String: String]) -> String {
        if let home = environment["HOME"], !home.isEmpty { return home }
        if let entry = getpwuid(getuid()), let directory = entry.pointee.pw_dir { return String(cString: directory) }
        return "/"
    }
}
