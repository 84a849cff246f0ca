import Dispatch

/// The local side of a client channel (`propctl bind`): a file, a coprocess or stdin/stdout.
///
/// An endpoint is confined to the channel's queue: every method is called there, and every
/// callback it makes runs there.
protocol LocalEndpoint: AnyObject {
    /// Starts watching the local side. `changed` runs whenever the local value may have changed,
    /// with the value the endpoint read and checked for that change (`nil` when there is none: no
    /// file, nothing said yet); `ended` runs once if the local side goes away for good (EOF on a
    /// stream, the coprocess exiting), with a failure if that was abnormal.
    ///
    /// The channel takes that value rather than reading ``current()`` again: by then another
    /// program may have begun a write the endpoint has not seen (`rm f; echo x > f` creating
    /// the file between the two reads sent its still empty content); that write's own event
    /// brings its value.
    func start(on queue: DispatchQueue, changed: @escaping (String?) -> Void,
               ended: @escaping (CommandFailure?) -> Void) throws(CommandFailure)

    /// The local value now: a file is read again, a stream answers its last line in either
    /// direction. `nil` when there is none (no file, nothing said yet).
    func current() -> String?

    /// Writes a value that came from the bus; false when it yielded to a local change that
    /// began meanwhile (that change is then delivered through `changed`).
    func write(_ text: String) throws(CommandFailure) -> Bool

    /// Handles local events that already happened but were not delivered yet, so that a bus
    /// change is never applied over a local change it has not seen.
    func deliverPending()

    /// Whether another program is in the middle of writing the local side (modified, not yet
    /// closed or settled). A bus value is not written then: it would replace the file between
    /// the writer's truncation and its write, and lose that write. The writer's change is
    /// handled once it settles, and the sides are compared again then.
    var isBeingWritten: Bool { get }

    /// Runs `body` with the local value once no other program holds the local side open, or at
    /// once where that cannot be told (a stream). A writer's truncation is visible a moment
    /// before its modification event (only its open is announced by then), so a look at the
    /// local side that no event asked for waits for the writer's close, or a deadline (a reader
    /// may keep it open), and is not taken if a write began while it read.
    func whenQuiet(_ body: @escaping (String?) -> Void)

    /// Whether no local change waits to be delivered (to settle, or to be looked at again). A
    /// stream cannot tell what its other end will still say: it answers true.
    var isIdle: Bool { get }

    /// Stops watching and releases what the endpoint holds (a coprocess is terminated).
    func stop()

    /// How the endpoint is named in messages, e.g. `file /tmp/x`.
    var label: String { get }
}
