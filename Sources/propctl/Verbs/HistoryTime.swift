/// A bound of `history --since/--until` and `revert --to`: a revision or a time, read by hand
/// (propctl links no Foundation).
enum HistoryTime {
    /// A revision (`@42`) or a time in nanoseconds since the epoch (UTC).
    enum Bound: Equatable {
        case revision(UInt64)
        case time(Int64)
    }

    /// The forms a bound takes, for error messages.
    static let forms = "@REV (e.g. @42), an RFC 3339 time (2026-12-01T10:00:00Z), a date (2026-12-01, its midnight UTC) or a time ago (30s, 10m, 2h, 3d)"

    /// Reads `text` as a bound of `option`; `now` (nanoseconds since the epoch) anchors the
    /// relative forms.
    static func parse(_ text: String, option: String, now: Int64) throws(CommandFailure) -> Bound {
        let failure = CommandFailure(.usage, "\(option) expects \(forms), got '\(text)'")
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty else { throw failure }
        if bytes.first == UInt8(ascii: "@") || bytes.allSatisfy(isDigit) {
            guard let revision = UInt64(bytes.first == UInt8(ascii: "@") ? String(text.dropFirst()) : text) else { throw failure }
            return .revision(revision)
        }
        if let unit = bytes.last, let seconds = unitSeconds(unit), bytes.count > 1, bytes.dropLast().allSatisfy(isDigit) {
            guard let count = Int64(String(decoding: bytes.dropLast(), as: UTF8.self)),
                  count <= Int64.max / 1_000_000_000 / seconds else { throw failure }
            return .time(now - count * seconds * 1_000_000_000)
        }
        guard let time = absolute(bytes) else { throw failure }
        return .time(time)
    }

    private static func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    private static func unitSeconds(_ byte: UInt8) -> Int64? {
        switch byte {
        case UInt8(ascii: "s"): return 1
        case UInt8(ascii: "m"): return 60
        case UInt8(ascii: "h"): return 3600
        case UInt8(ascii: "d"): return 86400
        case UInt8(ascii: "w"): return 7 * 86400
        default: return nil
        }
    }

    /// `YYYY-MM-DD`, or `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` (`T` or a space, any case).
    private static func absolute(_ bytes: [UInt8]) -> Int64? {
        var index = 0
        func number(_ width: Int) -> Int64? {
            guard index + width <= bytes.count, bytes[index..<index + width].allSatisfy(isDigit) else { return nil }
            defer { index += width }
            return bytes[index..<index + width].reduce(0) { $0 * 10 + Int64($1 - UInt8(ascii: "0")) }
        }
        func expect(_ characters: String) -> Bool {
            guard index < bytes.count, characters.utf8.contains(bytes[index]) else { return false }
            index += 1
            return true
        }
        guard let year = number(4), expect("-"), let month = number(2), expect("-"), let day = number(2),
              (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year) else { return nil }
        let midnight = daysSinceEpoch(year: year, month: month, day: day) * 86400
        if index == bytes.count { return nanoseconds(seconds: midnight, plus: 0) }
        guard expect("Tt "), let hour = number(2), expect(":"), let minute = number(2), expect(":"), let second = number(2),
              hour < 24, minute < 60, second < 61 else { return nil }
        var nanoseconds: Int64 = 0
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            var scale: Int64 = 100_000_000
            let start = index
            while index < bytes.count, isDigit(bytes[index]) {
                nanoseconds += Int64(bytes[index] - UInt8(ascii: "0")) * scale
                scale /= 10
                index += 1
            }
            guard index > start else { return nil }
        }
        var offset: Int64 = 0
        if expect("Zz") {
        } else if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
            let sign: Int64 = bytes[index] == UInt8(ascii: "-") ? -1 : 1
            index += 1
            guard let hours = number(2), expect(":"), let minutes = number(2), hours < 24, minutes < 60 else { return nil }
            offset = sign * (hours * 3600 + minutes * 60)
        } else {
            // A time without a zone would be read in some zone the user did not say.
            return nil
        }
        guard index == bytes.count else { return nil }
        return self.nanoseconds(seconds: midnight + hour * 3600 + minute * 60 + second - offset, plus: nanoseconds)
    }

    /// Seconds since the epoch in nanoseconds, clamped to what 64 bits hold (years 1677–2262):
    /// a bound beyond them is before or after every change anyway.
    private static func nanoseconds(seconds: Int64, plus fraction: Int64) -> Int64 {
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        guard !overflow else { return seconds < 0 ? Int64.min : Int64.max }
        let (sum, overflowed) = scaled.addingReportingOverflow(fraction)
        return overflowed ? Int64.max : sum
    }

    private static func isLeap(_ year: Int64) -> Bool { year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) }

    private static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: return isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    /// Days from 1970-01-01 to a civil date (Howard Hinnant's `days_from_civil`).
    private static func daysSinceEpoch(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146097 + dayOfEra - 719468
    }
}
