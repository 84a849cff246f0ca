/// The privilege a method call needs, declared in its ``MethodDescription`` and checked by the
/// tree's ``ObjectTree/accessCheck`` before the handler runs, so that no handler can forget it
/// and a denied call never reaches one.
///
/// The tree knows only where the names come from and which kind of right is asked; what "read",
/// "write" or "create" rights on a name mean is the service's access check's business.
public enum MethodAccess {
    /// Anyone may call.
    case none
    /// Read rights on each name.
    case read(AccessedNames)
    /// Write rights on each name, a name of `kind` (a service with more than one namespace of
    /// names, each with its own rights, tells them apart by kind).
    case write(AccessedNames, kind: NameKind = .standard)
    /// Create each name (which may exist already).
    case create(AccessedNames)
    /// Rights that belong to the service rather than to any one name (the names say what is
    /// protected, in the error).
    case privileged(AccessedNames)
    /// A check that depends on more than names (on other arguments, say).
    case custom((MethodCall) throws(DBusError) -> Void)

    /// Whether the call needs any privilege.
    public var isNone: Bool {
        if case .none = self { return true }
        return false
    }
}

/// Which namespace the names of a ``MethodAccess/write(_:kind:)`` belong to: the tree passes it
/// on to the access check unread, so a service gives it its own meanings.
public struct NameKind: Hashable, Sendable {
    /// The service's own name for the kind.
    public var name: String

    /// A kind called `name`.
    public init(_ name: String) { self.name = name }

    /// The service's main namespace.
    public static let standard = NameKind("")
}

/// Where the names a ``MethodAccess`` speaks of come from.
public enum AccessedNames {
    /// One argument: a string, each string of an array, or each key of a string-keyed dictionary
    /// in the order sent; `prefix` is put before each (for methods of an object that name what
    /// they act on relative to that object).
    case argument(String, prefix: String = "")
    /// Several arguments, in this order (the first denial is the one reported).
    case arguments([String])
    /// A name fixed when the description is made (the thing an object stands for, or a
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
