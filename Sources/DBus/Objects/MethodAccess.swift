/// The privilege a method call needs, declared in its ``MethodDescription`` and checked by the
/// tree's ``ObjectTree/accessCheck`` before the handler runs, so that no handler can forget it
/// and a denied call never reaches one.
///
/// The tree knows only where the names come from; what "write rights on a name" means (writers
/// lists, groups, the daemon's user) is the access check's business.
public enum MethodAccess {
    /// Anyone may call.
    case none
    /// Read rights on each name (a name that does not exist passes: the handler reports it).
    case read(AccessedNames)
    /// Write rights on each name, by its own writers list (a name that does not exist passes).
    case write(AccessedNames)
    /// Create each name: write rights on it if it exists, the default writers' rights if not.
    case create(AccessedNames)
    /// Write rights on each command, by the command's writers list (an unknown one passes).
    case writeCommand(AccessedNames)
    /// The default writers' rights, for what has no writers list of its own (the names say what
    /// in the error).
    case privileged(AccessedNames)
    /// A check that depends on more than names (Bind's keys depend on its options).
    case custom((MethodCall) throws(DBusError) -> Void)

    /// Whether the call needs any privilege.
    public var isNone: Bool {
        if case .none = self { return true }
        return false
    }
}

/// Where the names a ``MethodAccess`` speaks of come from.
public enum AccessedNames {
    /// One argument: a string, each string of an array, or each key of a string-keyed dictionary
    /// in the order sent; `prefix` is put before each (a group's `Values` methods name keys
    /// without their group).
    case argument(String, prefix: String = "")
    /// Several arguments, in this order (the first denial is the one reported).
    case arguments([String])
    /// A name fixed when the description is made (the command an object stands for, or a
    /// description of what is protected).
    case fixed(String)
}

extension MethodCall {
    /// The names `source` gives for this call, in order.
    public func names(_ source: AccessedNames) throws(DBusError) -> [String] {
        switch source {
        case .fixed(let name): return [name]
        case .argument(let name, let prefix): return try argumentNames(name).map { prefix + $0 }
        case .arguments(let names):
            var all: [String] = []
            for name in names { all += try argumentNames(name) }
            return all
        }
    }

    private func argumentNames(_ name: String) throws(DBusError) -> [String] {
        switch try argument(name) {
        case .array(_, let items): return items.compactMap(\.stringValue)
        case .dictionary(_, _, let entries): return entries.compactMap(\.key.stringValue)
        case let value:
            guard let text = value.stringValue else {
                throw .failed("argument '\(name)' of \(message.member ?? "the method") names no key")
            }
            return [text]
        }
    }
}
