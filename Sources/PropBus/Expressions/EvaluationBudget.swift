/// What one evaluation, or one chain of them, may spend: transforms run on every write, on
/// values any writer chooses, so their work must be bounded by the limits and not by the input.
///
/// Two bounds, both reported as `LimitsExceeded`:
/// - no intermediate string may grow past ``maximumSize`` (the daemon's `--max-value-size`): a
///   result that large would be refused anyway, and checking only the end result let
///   `value + value + …` build hundreds of megabytes first;
/// - ``remaining`` work units: one per node evaluated, one per byte a string operation reads or
///   builds, and for a search (`contains`) one per comparison plus the bytes it compares, so
///   many steps each below the size limit, or a search that compares far more than it reads,
///   still stop early.
public struct EvaluationBudget: Sendable {
    /// The largest intermediate string, in UTF-8 bytes.
    public let maximumSize: Int
    /// The work left.
    public private(set) var remaining: Int
    /// The work granted at the start, for the refusal's message.
    public let work: Int

    /// A budget for strings up to `maximumSize` bytes and `work` units in all; by default 32
    /// times the size limit: any real transform (or chain of them) stays far below, and a
    /// refused one holds the daemon's one queue for about as long as reading 32 values of
    /// the largest size (some 50–100 ms), so another client's call waits no longer.
    public init(maximumSize: Int = 1 << 20, work: Int? = nil) {
        self.maximumSize = maximumSize
        self.work = work ?? (32 * maximumSize + 65536)
        remaining = self.work
    }

    /// Spends `units`, or throws when the budget is used up.
    mutating func spend(_ units: Int) throws(PropBusError) {
        remaining -= units
        guard remaining >= 0 else {
            remaining = 0
            throw PropBusError(.limitsExceeded, "the evaluation exceeded its work budget of \(work) units (one per byte read, built or compared; the value size limit is \(maximumSize) bytes)")
        }
    }

    /// Throws unless a string of `size` bytes is allowed, before it is built.
    func admit(stringOf size: Int) throws(PropBusError) {
        guard size <= maximumSize else {
            throw PropBusError(.limitsExceeded, "an intermediate string would be \(size) bytes; the value size limit is \(maximumSize) bytes")
        }
    }
}
