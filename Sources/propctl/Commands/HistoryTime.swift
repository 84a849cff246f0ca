/// A bound of `history --since/--until` and `revert --to`: a revision or a time.
enum HistoryTime {
    /// A revision (`@42`) or a time in nanoseconds since the epoch (UTC).
    enum Bound: Equatable {
        case revision(UInt64)
        case time(Int64)
    }

    static func parse(_ text: String, option: String, now: Int64) throws(CommandFailure) -> Bound {
        throw CommandFailure(.usage, "not yet")
    }
}
