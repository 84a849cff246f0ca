import PropBus

/// The store is the service's history too: it records each round's changes in the commit's
/// transaction, and answers the queries, refused attempts and pruning from its tables
/// (SQLiteStore+History.swift, DeniedHistory.swift).
extension SQLiteStore: HistoryStore {
    /// ``HistoryOptions/isEnabled``.
    public var historyIsEnabled: Bool { historyOptions.isEnabled }
    /// ``HistoryOptions/recordsDenied``, with history on.
    public var recordsDenied: Bool { historyOptions.isEnabled && historyOptions.recordsDenied }
}
