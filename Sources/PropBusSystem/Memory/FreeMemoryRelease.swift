import CLinux

/// When the memory a burst of work used for a moment goes back to the kernel (glibc's
/// `malloc_trim(3)`).
///
/// A burst that changes thousands of keys (the fleet's full read of etcd, a host offering its
/// model file's fleet keys one after the other, a large `propctl load`) allocates tens of MiB
/// briefly: etcd's answers and their events, the model's undo log, the round's rows to store, the
/// history's write set. Freed, that memory stays resident in the arenas of the worker threads
/// that did the work: glibc only gives back the top of a heap, and the entries the burst made
/// keep it pinned. With 10,000 fleet keys that was 16 MiB free but resident, a host at 48 MiB
/// against 25 MiB for the same keys held locally.
///
/// The owner (the service, on its queue) counts the work it does (``count(_:)``: changes,
/// commits). Once ``threshold`` units have gone by since the last release, a release is due at
/// the end of a commit (``becameDue()``); it runs when a quiet period passes with no more work
/// (``isQuiet()``), so a sustained load never pays for it and a burst pays once, at its end.
/// Interactive use never reaches the threshold.
public struct FreeMemoryRelease: Sendable {
    /// Work between two releases, by default: far above any interactive round, reached by
    /// start-up loads, full reads and bulk writes.
    public static let defaultThreshold = 2048

    /// Units of work (changes, commits) after which a release is due.
    public let threshold: Int
    /// Work counted since the last release.
    public private(set) var countSinceRelease = 0
    /// Whether a release is due and not run yet (at most one at a time).
    public private(set) var isDue = false
    /// ``countSinceRelease`` when the due release was last looked at.
    private var countAtLastLook = 0

    /// A policy with a release due after every `threshold` units of work.
    public init(threshold: Int = FreeMemoryRelease.defaultThreshold) {
        self.threshold = threshold
    }

    /// Counts `units` of work.
    public mutating func count(_ units: Int) {
        countSinceRelease += units
    }

    /// Call when a piece of work is done (a commit): true once, when a release has become due;
    /// the owner then looks again after its quiet period (``isQuiet()``).
    public mutating func becameDue() -> Bool {
        guard !isDue, countSinceRelease >= threshold else { return false }
        isDue = true
        countAtLastLook = countSinceRelease
        return true
    }

    /// Whether no work was counted since the due release was last looked at: true means release
    /// now (then ``released()``); false means the burst goes on, look again after the period.
    public mutating func isQuiet() -> Bool {
        defer { countAtLastLook = countSinceRelease }
        return countSinceRelease == countAtLastLook
    }

    /// The due release ran: counting starts again.
    public mutating func released() {
        countSinceRelease = 0
        countAtLastLook = 0
        isDue = false
    }

    /// Gives the free pages of every malloc arena back to the kernel now; whether any were.
    @discardableResult
    public static func releaseNow() -> Bool {
        propbus_trim_heap() == 1
    }
}
