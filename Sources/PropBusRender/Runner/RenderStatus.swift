/// Where a render stands, as its state keys publish it: `render.NAME.State`, `.Message` and
/// `.Revision`.
public struct RenderStatus: Sendable, Equatable {
    /// `render.NAME.State`.
    public enum State: String, Sendable, CaseIterable {
        /// Declared, not rendered yet.
        case pending
        /// The file holds what the keys give (written now, or already).
        case ok
        /// A required key is unset or empty, or a key the template reads does not exist:
        /// nothing was written.
        case waitingForKeys = "waiting-for-keys"
        /// The template could not be rendered (a type error, a value its escaping refuses, a
        /// secret for a file others may read): nothing was written.
        case renderFailed = "render-failed"
        /// `check` refused the staged file: the old file stays.
        case checkFailed = "check-failed"
        /// The file could not be staged or put in place (a missing directory, a full disk, an
        /// unknown owner): the old file stays.
        case installFailed = "install-failed"
        /// `reload` failed: the previous file was put back and reloaded again.
        case reloadFailed = "reload-failed"
    }

    public var state: State
    /// What happened, for people: names keys, files and programs, never a secret's value.
    public var message: String
    /// The model revision whose values the installed file holds (that of the last render that
    /// ended `ok`); 0 before one did.
    public var revision: UInt64

    public init(state: State, message: String, revision: UInt64) {
        self.state = state
        self.message = message
        self.revision = revision
    }

    public static let pending = RenderStatus(state: .pending, message: "not rendered yet", revision: 0)
}
