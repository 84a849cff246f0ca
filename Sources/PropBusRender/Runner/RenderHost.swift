import DBusValues

/// What the renders ask of the daemon: the narrow port between them and everything else. The
/// daemon gives the model's values (read on its queue, between rounds), publishes the state
/// keys and logs; in return it tells the ``RenderRunner`` which keys each committed round
/// changed (``RenderRunner/noteChanged(_:)``).
public protocol RenderHost: RenderValues, AnyObject {
    /// The model revision of the values ``RenderValues/renderValue(of:)`` reads now.
    var renderRevision: UInt64 { get }
    /// Publishes `status` as `render.NAME.State`, `.Message` and `.Revision` (made the first time).
    func publishRenderStatus(_ status: RenderStatus, of name: String)
    /// Removes the state keys of a render that is no longer declared.
    func removeRenderStatus(of name: String)
    /// A line for the daemon's log.
    func logRender(_ line: String)
}

/// A file a render put in place, with what it replaced.
public struct InstalledRender: Sendable, Equatable {
    public var name: String
    public var destination: String
    /// What was there before; `nil`: nothing.
    public var previous: FileVersion?
    /// The model revision whose values the new file holds.
    public var revision: UInt64
}

/// Told of every file a render installed, with what it replaced: the seam for a confirmed
/// apply, which keeps a rendered file as part of a pending apply and, when the apply is rolled
/// back, gives the record back to ``RenderRunner/rollBack(_:then:)`` (the previous file put
/// back, the service reloaded).
public protocol RenderInstallRecorder: AnyObject {
    func renderInstalled(_ record: InstalledRender)
}

/// What a render would write now (`propctl render preview`), without writing it.
public struct RenderPreview: Sendable, Equatable {
    /// `ok` when there is something to write; `waiting-for-keys` or `render-failed` otherwise.
    public var state: RenderStatus.State
    public var message: String
    public var bytes: [UInt8]
    /// Whether secret values were replaced by `<secret>`.
    public var masked: Bool
}

/// A render's declaration and where it stands, for `propctl render list` and `show`.
public struct RenderSummary: Sendable {
    public var declaration: RenderDeclaration
    public var status: RenderStatus
    /// When its last run ended (microseconds since the epoch); `nil`: none yet.
    public var lastRun: UInt64?
    /// Whether a run is in flight now.
    public var running: Bool
}
