extension Output {
    /// `text` with control characters and backslashes escaped (`\n`, `\t`, `\r`, `\\`, `\x1b`),
    /// so that one value stays on one line and in one column of line- and tab-separated output.
    /// `--json` output is never escaped this way: JSON has its own escapes.
    static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7f || $0 == "\\" }) else { return text }
        var result = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\t": result += "\\t"
            case "\r": result += "\\r"
            case _ where scalar.value < 0x20 || scalar.value == 0x7f:
                let hex = String(scalar.value, radix: 16)
                result += "\\x" + (hex.count < 2 ? "0" + hex : hex)
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result
    }
}
