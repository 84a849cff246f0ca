import DBusValues

/// One entry of a layer file (`mandatory.d/*.json`, `defaults.d/*.json`): a key or a prefix, and
/// a value still in JSON.
///
/// The value is typed only against the key's definition, when the key exists: a file may name a
/// key that a model file or a program creates later, and the entry waits for it.
public struct LayerEntry: Sendable, Hashable {
    /// What an entry names.
    public enum Target: Sendable, Hashable {
        /// One key.
        case key(Key)
        /// Every key whose text starts with this (`"settings.*"` in a file is `"settings."`).
        case prefix(String)

        /// Whether `key` is one the entry names.
        public func matches(_ key: Key) -> Bool {
            switch self {
            case .key(let named): return named == key
            case .prefix(let prefix): return key.text.hasPrefix(prefix)
            }
        }

        /// As written in the file.
        public var text: String {
            switch self {
            case .key(let key): return key.text
            case .prefix(let prefix): return prefix + "*"
            }
        }

        /// A key (`GROUP.NAME`) or a group prefix (`GROUP.*`), as a layer file names it.
        public init(parsing text: String) throws(PropBusError) {
            guard text.hasSuffix(".*") else {
                self = .key(try Key(text))
                return
            }
            let group = String(text.dropLast(2))
            guard (try? Key(group + ".x")) != nil else {
                throw PropBusError(.invalidKey, "\"\(text)\" is not a group prefix: expected a group name followed by .* (\"settings.*\")")
            }
            self = .prefix(group + ".")
        }
    }

    /// ``ValueLayer/mandatory``, ``ValueLayer/site`` or ``ValueLayer/vendor``.
    public var layer: ValueLayer
    public var target: Target
    public var value: JSONValue
    /// A mandatory entry's `"for"`: whom the lock refuses (`nil`: everyone but privileged callers).
    public var lockedFor: [String]?
    /// The file (a path).
    public var source: String

    public init(layer: ValueLayer, target: Target, value: JSONValue, lockedFor: [String]? = nil, source: String) {
        self.layer = layer
        self.target = target
        self.value = value
        self.lockedFor = lockedFor
        self.source = source
    }
}

/// A mistake in a layer file: the file, the key (when one entry is concerned) and what was
/// expected. Never the value: a secret key's value would show in `propctl status` and the log.
public struct LayerProblem: Sendable, Hashable, CustomStringConvertible {
    public var file: String
    public var key: String?
    public var problem: String

    /// A NUL in any part is shown as U+FFFD: problems are sent on the bus, which carries no NUL.
    public init(file: String, key: String? = nil, problem: String) {
        self.file = TextBytes.replacingNUL(in: file)
        self.key = key.map(TextBytes.replacingNUL(in:))
        self.problem = TextBytes.replacingNUL(in: problem)
    }

    public var description: String { key.map { "\(file): \($0): \(problem)" } ?? "\(file): \(problem)" }
}

/// Every layer file as read: the entries in the order they apply (each layer's files in name
/// order, a later entry winning over an earlier one), and what could not be read.
public struct LayerFileSet: Sendable, Hashable {
    public var entries: [LayerEntry]
    /// Files or entries that could not be read (bad JSON, a bad `"for"`, an invalid key).
    public var problems: [LayerProblem]

    public init(entries: [LayerEntry] = [], problems: [LayerProblem] = []) {
        self.entries = entries
        self.problems = problems
    }

    /// Whether no file gives anything.
    public var isEmpty: Bool { entries.isEmpty }

    /// This set with the entries and problems of one file of `mandatory.d` (`path`) replaced by
    /// `entries` and `problems`, where a reload would read them: after the mandatory files whose
    /// paths sort before it, before the others and before every default. The other files stay
    /// as they were read, even if they changed on disk since.
    public func replacingMandatoryFile(_ path: String, entries: [LayerEntry], problems: [LayerProblem]) -> LayerFileSet {
        var kept = self.entries.filter { $0.source != path }
        let position = kept.firstIndex { $0.layer != .mandatory || $0.source > path } ?? kept.endIndex
        kept.insert(contentsOf: entries, at: position)
        return LayerFileSet(entries: kept, problems: self.problems.filter { $0.file != path } + problems)
    }
}

/// Who a mandatory value's lock refuses (docs/layers.md, "Locks").
///
/// Without `"for"`, everyone but privileged callers: root and, where callers are checked (the
/// system bus), the daemon's own user. On a session bus the daemon's user *is* the user being
/// locked, so it is not exempt there. With `"for"`, exactly the users and `@group`s named,
/// resolved as access control resolves `writers` (names and numeric ids; groups the user belongs
/// to now).
public struct LockAuthority: Sendable {
    /// The daemon's own uid: it stands for a caller of unknown uid (a session bus).
    public var daemonUserID: UInt32
    /// Whether callers' credentials are checked (the daemon's user is then privileged).
    public var checksCredentials: Bool
    public var accounts: Accounts

    public init(daemonUserID: UInt32, checksCredentials: Bool, accounts: Accounts) {
        self.daemonUserID = daemonUserID
        self.checksCredentials = checksCredentials
        self.accounts = accounts
    }

    /// Locks everyone but root; names resolve to nobody (tests, and a model without a daemon).
    public static let rootOnly = LockAuthority(daemonUserID: 0, checksCredentials: false, accounts: .table(users: [:], groups: [:]))

    /// Whether `mandatory` refuses a write by `userID` (`nil`: not known, the daemon's user).
    public func locks(_ mandatory: MandatoryValue, userID: UInt32?) -> Bool {
        let uid = userID ?? daemonUserID
        guard let names = mandatory.lockedFor else {
            return !(uid == 0 || (checksCredentials && uid == daemonUserID))
        }
        // Groups are looked up only when the list names one.
        let groups = names.contains { $0.hasPrefix("@") } ? accounts.groupIDs(ofUser: uid) : []
        let caller = Credentials(userID: uid, groupIDs: groups)
        return names.contains { AccessPolicy.entry($0, names: caller, accounts: accounts) }
    }
}
