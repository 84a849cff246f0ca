import DBusValues
import Glibc
import PropBus
import SystemKit

/// A user or group a rendered file belongs to: a name looked up when the file is written (a
/// user created later counts), or a number.
public enum AccountName: Sendable, Hashable, CustomStringConvertible {
    case name(String)
    case id(UInt32)

    init?(_ text: String) {
        if let id = UInt32(text) { self = .id(id); return }
        guard !text.isEmpty, text.utf8.count <= 256, !text.contains("/"), !text.contains(":"),
              !text.contains(where: \.isWhitespace) else { return nil }
        self = .name(text)
    }

    public var description: String {
        switch self {
        case .name(let name): name
        case .id(let id): String(id)
        }
    }
}

/// How long a render waits for keys to settle before it writes (consul-template's `wait`): it
/// renders once no key it reads has changed for `minimum`, and at the latest `maximum` after
/// the first change it has not rendered yet. Zero: at once.
public struct RenderWait: Sendable, Equatable {
    /// Nanoseconds.
    public var minimum: UInt64
    public var maximum: UInt64

    public static let none = RenderWait(minimum: 0, maximum: 0)

    public init(minimum: UInt64, maximum: UInt64) {
        self.minimum = minimum
        self.maximum = Swift.max(minimum, maximum)
    }
}

/// A key (or every key of a group) a render needs set and non-empty before it writes anything.
public enum RenderRequirement: Sendable, Hashable, CustomStringConvertible {
    /// `KEY`: it exists and its value is not empty (`""`, `[]`, `{}`).
    case key(String)
    /// `GROUP.*`: the group has at least one key, and none is empty.
    case group(String)

    public var description: String {
        switch self {
        case .key(let key): key
        case .group(let group): group + ".*"
        }
    }
}

/// One `renders` entry of a model file (docs/render.md): which template makes which file, whose
/// and with what mode, how it is checked before it is installed and how its service is told.
public struct RenderDeclaration: Sendable, Equatable {
    /// The render's name: its state keys are `render.NAME.State`, `.Message` and `.Revision`.
    public var name: String
    /// The model file that declared it.
    public var source: String
    public var template: Template
    /// The template's file; `nil` for `template_text`.
    public var templatePath: String?
    /// Whether only root (and the daemon's user) may read the template: then only they may preview it.
    public var templateIsPrivate: Bool
    /// The file written, an absolute path.
    public var destination: String
    /// `nil`: the daemon's own user.
    public var owner: AccountName?
    /// `nil`: the owner's primary group (the daemon's group when the owner is not given).
    public var group: AccountName?
    /// The file's permission bits (0644 unless given).
    public var mode: UInt32
    /// Run with the staged file before it is installed (`{{file}}` is its path); empty: none.
    public var check: [String]
    /// Run once the file is installed (`{{file}}` is its path); empty: none.
    public var reload: [String]
    public var wait: RenderWait
    public var requirements: [RenderRequirement]
    /// How values are written unless a tag says otherwise.
    public var escaping: Escaping
    /// The most seconds `check` and `reload` may each run.
    public var timeout: Double
    public var description: String?

    /// The longest a `check` or `reload` may run unless the declaration says otherwise, in seconds.
    public static let defaultTimeout = 30.0
    /// The most permissive mode a file holding a secret key's value may have.
    public static let secretModeCeiling: UInt32 = 0o640
    /// The fields of a declaration, for messages.
    public static let fieldNames = ["template", "template_text", "destination", "owner", "group", "mode", "check", "reload",
                                    "wait", "require", "escape", "timeout", "description"]

    /// Keys whose change may change the output: what the template reads and what it requires.
    public var keys: Set<String> {
        template.keys.union(requirements.compactMap { if case .key(let key) = $0 { key } else { nil } })
    }

    /// Groups whose keys coming, going or changing may change the output.
    public var groups: Set<String> {
        template.groups.union(requirements.compactMap { if case .group(let group) = $0 { group } else { nil } })
    }

    /// Whether a file of `mode` may hold a secret key's value: no bits beyond `rw-r-----`.
    public static func mayHoldSecrets(mode: UInt32) -> Bool { mode & ~secretModeCeiling == 0 }

    /// Whether `name` can name a render: one group segment of a key, so `render.NAME.State` is a key.
    public static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 64 && TemplateParser.isName(name)
    }
}
