/// A signal match rule, both as sent to the bus (`AddMatch`) and as checked locally.
///
/// Include `sender` where possible: brokers check rules without one linearly.
public struct MatchRule: Hashable, Sendable {
    public var sender: String?
    public var path: String?
    public var pathNamespace: String?
    public var interface: String?
    public var member: String?
    public var arg0: String?

    public init(sender: String? = nil, path: String? = nil, pathNamespace: String? = nil,
                interface: String? = nil, member: String? = nil, arg0: String? = nil) {
        self.sender = sender
        self.path = path
        self.pathNamespace = pathNamespace
        self.interface = interface
        self.member = member
        self.arg0 = arg0
    }

    /// The bus's `NameOwnerChanged` signal (a name got, changed or lost its owner), for every
    /// name or, with `arg0`, for that name only. The one spelling of that rule.
    public static func nameOwnerChanged(arg0: String? = nil) -> MatchRule {
        MatchRule(sender: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                  member: "NameOwnerChanged", arg0: arg0)
    }

    /// The rule text for `org.freedesktop.DBus.AddMatch`.
    public var text: String {
        var parts = ["type='signal'"]
        func add(_ key: String, _ value: String?) {
            guard let value else { return }
            // A quote inside a value is written as '\'' (close, escaped quote, reopen).
            let escaped = value.split(separator: "'", omittingEmptySubsequences: false).joined(separator: "'\\''")
            parts.append("\(key)='\(escaped)'")
        }
        add("sender", sender)
        add("path", path)
        add("path_namespace", pathNamespace)
        add("interface", interface)
        add("member", member)
        add("arg0", arg0)
        return parts.joined(separator: ",")
    }

    /// Whether a received signal matches. A well-known `sender` cannot be checked locally
    /// (signals carry the unique name), so only unique names are compared.
    public func matches(_ message: Message) -> Bool {
        guard message.kind == .signal else { return false }
        if let sender, sender.hasPrefix(":"), message.sender != sender { return false }
        if let path, message.path != path { return false }
        if let pathNamespace, let messagePath = message.path {
            let prefix = pathNamespace == "/" ? "/" : pathNamespace + "/"
            if messagePath != pathNamespace && !messagePath.hasPrefix(prefix) { return false }
        }
        if let interface, message.interface != interface { return false }
        if let member, message.member != member { return false }
        if let arg0 {
            guard let first = try? message.arguments().first, first.stringValue == arg0 else { return false }
        }
        return true
    }
}
