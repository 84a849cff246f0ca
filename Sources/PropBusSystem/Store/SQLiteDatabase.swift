import CSQLite
import PropBus

/// An SQLite result code with SQLite's message, thrown at the C boundary and no further than
/// ``SQLiteStore``, which turns it into `StoreFailed`.
struct SQLiteError: Error, CustomStringConvertible {
    var code: Int32
    var message: String

    var description: String { "\(message) (SQLite code \(code))" }
}

/// An open database (`sqlite3 *`), closed in `deinit` with `sqlite3_close_v2`.
///
/// Not thread-safe by itself: opened with `SQLITE_OPEN_NOMUTEX`, so its owner confines it.
final class SQLiteDatabase {
    let handle: OpaquePointer
    let path: String

    /// `sqlite3_open_v2(path, READWRITE | CREATE | NOMUTEX)`.
    init(path: String) throws(SQLiteError) {
        var handle: OpaquePointer?
        let status = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nil)
        guard status == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(status))
            sqlite3_close_v2(handle)
            throw SQLiteError(code: status, message: message)
        }
        self.handle = handle
        self.path = path
        sqlite3_extended_result_codes(handle, 1)
    }

    deinit { sqlite3_close_v2(handle) }

    /// The rows the last statement inserted, changed or deleted.
    var changes: Int32 { sqlite3_changes(handle) }

    /// `sqlite3_exec` for statements without results.
    func execute(_ sql: String) throws(SQLiteError) {
        let status = sqlite3_exec(handle, sql, nil, nil, nil)
        guard status == SQLITE_OK else { throw error(status) }
    }

    /// Compiles `sql` once (`sqlite3_prepare_v3` with `SQLITE_PREPARE_PERSISTENT`).
    func prepare(_ sql: String) throws(SQLiteError) -> SQLiteStatement {
        var statement: OpaquePointer?
        let status = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard status == SQLITE_OK, let statement else { throw error(status) }
        return SQLiteStatement(statement, database: self)
    }

    /// Runs a query and returns the first column of every row as text (for PRAGMAs).
    func textRows(_ sql: String) throws(SQLiteError) -> [String] {
        let statement = try prepare(sql)
        var rows: [String] = []
        while try statement.step() { rows.append(statement.text(0) ?? "") }
        return rows
    }

    /// Whether a transaction is open (`sqlite3_get_autocommit` is 0).
    var inTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }

    func error(_ status: Int32) -> SQLiteError {
        SQLiteError(code: status, message: String(cString: sqlite3_errmsg(handle)))
    }
}

/// A prepared statement (`sqlite3_stmt *`), finalized in `deinit`.
final class SQLiteStatement {
    private let handle: OpaquePointer
    private let database: SQLiteDatabase

    fileprivate init(_ handle: OpaquePointer, database: SQLiteDatabase) {
        self.handle = handle
        self.database = database
    }

    deinit { sqlite3_finalize(handle) }

    /// `SQLITE_TRANSIENT`: SQLite copies the bound bytes before the call returns. The C macro
    /// is a cast of -1 and does not import.
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    /// Binds parameters 1… in order, after resetting the statement.
    func bind(_ values: [SQLiteValue]) throws(SQLiteError) {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
        for (index, value) in values.enumerated() { try bind(value, at: Int32(index + 1)) }
    }

    /// Makes the statement ready to run again, keeping its bindings: a statement run for many
    /// rows binds again (``bind(_:at:)``) only what changes from one to the next.
    func reset() { sqlite3_reset(handle) }

    /// Binds one parameter (from 1), leaving the others as they are.
    func bind(_ value: SQLiteValue, at position: Int32) throws(SQLiteError) {
        let status: Int32
        switch value {
        case .integer(let v): status = sqlite3_bind_int64(handle, position, v)
        case .text(var s):
            // Its length given: no C string made, no strlen. An empty text is not NULL.
            status = s.withUTF8 { utf8 in
                guard let base = utf8.baseAddress else { return sqlite3_bind_text(handle, position, "", 0, Self.transient) }
                return base.withMemoryRebound(to: CChar.self, capacity: utf8.count) {
                    sqlite3_bind_text(handle, position, $0, Int32(utf8.count), Self.transient)
                }
            }
        case .blob(let bytes):
            status = bytes.withUnsafeBytes { sqlite3_bind_blob(handle, position, $0.baseAddress, Int32($0.count), Self.transient) }
        case .null: status = sqlite3_bind_null(handle, position)
        }
        guard status == SQLITE_OK else { throw database.error(status) }
    }

    /// Steps once: `true` when a row is available, `false` when done.
    func step() throws(SQLiteError) -> Bool {
        switch sqlite3_step(handle) {
        case SQLITE_ROW: return true
        case SQLITE_DONE:
            sqlite3_reset(handle)
            return false
        case let status:
            let error = database.error(status)
            sqlite3_reset(handle)
            throw error
        }
    }

    /// Runs the statement to completion with the bindings it has and `first` and `second` as
    /// blobs (`nil`: NULL) at `positions`, which SQLite reads in place instead of copying
    /// (`SQLITE_STATIC`): a history row binds two values per write, and each copy was a
    /// malloc, a memcpy and a free. The bytes are borrowed for the step alone: NULL is bound
    /// there again before this returns, so no pointer to them stays in the statement.
    func run(blobs first: [UInt8]?, _ second: [UInt8]?, at positions: (Int32, Int32)) throws(SQLiteError) {
        func borrowing(_ bytes: [UInt8]?, _ body: (UnsafeRawBufferPointer?) -> Int32) -> Int32 {
            guard let bytes else { return body(nil) }
            return bytes.withUnsafeBytes { body($0) }
        }
        func bind(_ buffer: UnsafeRawBufferPointer?, at position: Int32) -> Int32 {
            guard let buffer else { return sqlite3_bind_null(handle, position) }
            // A zero-length blob is not NULL: SQLite takes a null pointer with length 0 as NULL.
            return sqlite3_bind_blob(handle, position, buffer.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(buffer.count), nil)
        }
        var failure: SQLiteError?
        let status = borrowing(first) { a in
            borrowing(second) { b in
                var status = bind(a, at: positions.0)
                if status == SQLITE_OK { status = bind(b, at: positions.1) }
                if status == SQLITE_OK {
                    repeat { status = sqlite3_step(handle) } while status == SQLITE_ROW
                }
                if status != SQLITE_OK, status != SQLITE_DONE { failure = database.error(status) }
                sqlite3_reset(handle)
                sqlite3_bind_null(handle, positions.0)
                sqlite3_bind_null(handle, positions.1)
                return status
            }
        }
        if let failure { throw failure }
        guard status == SQLITE_OK || status == SQLITE_DONE else { throw database.error(status) }
    }

    /// Binds `values` and runs the statement to completion.
    func run(_ values: [SQLiteValue]) throws(SQLiteError) {
        try bind(values)
        while try step() {}
    }

    /// Runs the statement to completion with the bindings it has.
    func run() throws(SQLiteError) {
        while try step() {}
    }

    func text(_ column: Int32) -> String? {
        guard let pointer = sqlite3_column_text(handle, column) else { return nil }
        return String(cString: pointer)
    }

    func integer(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }

    /// Whether the column is SQL NULL (e.g. the missing side of a LEFT JOIN).
    func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }

    func blob(_ column: Int32) -> [UInt8] {
        let count = Int(sqlite3_column_bytes(handle, column))
        guard count > 0, let pointer = sqlite3_column_blob(handle, column) else { return [] }
        return Array(UnsafeRawBufferPointer(start: pointer, count: count))
    }
}

/// A parameter for ``SQLiteStatement/bind(_:)``.
enum SQLiteValue {
    case integer(Int64)
    case text(String)
    case blob([UInt8])
    case null
}
