import Glibc

/// Numbers of GVariant's text format: integers as C's `strtoull` with base 0 reads them
/// (`0x` hex, a leading `0` octal, an optional sign), doubles as `strtod`, each range-checked for
/// its type; and doubles written so that reading them back gives the same bits.
enum GVariantNumbers {
    static func value(_ token: String, as type: GVariantType) throws(GVariantError) -> GVariantValue {
        if type == .double {
            guard let double = Double(token) else { throw GVariantError("invalid character in number '\(token)'") }
            guard double.isFinite || token.lowercased().contains("inf") || token.lowercased().contains("nan") else {
                throw GVariantError("number too big for any type: \(token)")
            }
            return .double(double)
        }
        var digits = Substring(token)
        let negative = digits.first == "-"
        if negative { digits = digits.dropFirst() } else if digits.first == "+" { digits = digits.dropFirst() }
        var radix = 10
        if digits.hasPrefix("0x") || digits.hasPrefix("0X") {
            radix = 16
            digits = digits.dropFirst(2)
        } else if digits.count > 1, digits.first == "0" {
            radix = 8
            digits = digits.dropFirst()
        }
        guard !digits.isEmpty else { throw GVariantError("invalid character in number '\(token)'") }
        var magnitude: UInt64 = 0
        for character in digits {
            guard let digit = character.hexDigitValue, digit < radix else { throw GVariantError("invalid character in number '\(token)'") }
            let (times, overflow1) = magnitude.multipliedReportingOverflow(by: UInt64(radix))
            let (sum, overflow2) = times.addingReportingOverflow(UInt64(digit))
            guard !overflow1, !overflow2 else { throw GVariantError("integer too big for any type: \(token)") }
            magnitude = sum
        }
        let isNegative = negative && magnitude != 0
        func overflow() -> GVariantError { GVariantError("number out of range for type '\(type)': \(token)") }
        func signed(_ limit: UInt64) throws(GVariantError) -> Int64 {
            // The most negative value has one more unit than the most positive.
            guard magnitude <= limit + (isNegative ? 1 : 0) else { throw overflow() }
            return isNegative ? (magnitude == limit + 1 ? -Int64(limit) - 1 : -Int64(magnitude)) : Int64(magnitude)
        }
        func unsigned(_ limit: UInt64) throws(GVariantError) -> UInt64 {
            guard !isNegative, magnitude <= limit else { throw overflow() }
            return magnitude
        }
        switch type {
        case .byte: return .byte(UInt8(try unsigned(UInt64(UInt8.max))))
        case .int16: return .int16(Int16(try signed(UInt64(Int16.max))))
        case .uint16: return .uint16(UInt16(try unsigned(UInt64(UInt16.max))))
        case .int32: return .int32(Int32(try signed(UInt64(Int32.max))))
        case .uint32: return .uint32(UInt32(try unsigned(UInt64(UInt32.max))))
        case .int64: return .int64(try signed(UInt64(Int64.max)))
        case .uint64: return .uint64(try unsigned(UInt64.max))
        case .handle: return .handle(Int32(try signed(UInt64(Int32.max))))
        default: throw GVariantError("can not parse as value of type '\(type)'")
        }
    }

    /// The text GLib gives (`g_ascii_dtostr`: C's `%.17g`, which reads back as the same bits),
    /// with `.0` added when it has no `.` or exponent, so that it does not read back as an integer.
    static func text(of value: Double) -> String {
        var buffer = [CChar](repeating: 0, count: 40)
        _ = withVaList([value]) { arguments in vsnprintf(&buffer, buffer.count, "%.17g", arguments) }
        var text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if !text.contains(where: { $0 == "." || $0 == "e" || $0 == "n" || $0 == "N" }) { text += ".0" }
        return text
    }
}
