import DBusValues
import PropBus

/// How a value is written into a rendered file: the render's `escape` option, or `| NAME` after
/// one tag's expression. Each mode either writes the value so that it cannot change the file's
/// structure, or refuses it (the render fails and the old file stays); no mode quotes a refused
/// value in its message.
public enum Escaping: String, Sendable, CaseIterable {
    /// As `propctl get` prints it, refused if it holds a control character other than a tab:
    /// in a line-based file (nginx, chrony, hostapd, an ini or a drop-in) a newline in a value
    /// would start a directive of its own.
    case text
    /// As `propctl get` prints it, whatever it holds: for keys only root may write.
    case raw
    /// As a JSON value: strings quoted and escaped, numbers and booleans bare, containers as JSON.
    case json
    /// As XML or HTML character data or an attribute value: `& < > " '` as entities; control
    /// characters XML 1.0 cannot hold are refused.
    case xml
    /// As one POSIX shell word in single quotes (an environment file, a script).
    case shell

    /// The names, for messages.
    public static var names: String { allCases.map(\.rawValue).joined(separator: ", ") }

    /// The value's text in this mode, or why it is refused (never quoting it).
    public func write(_ value: DBusValue) -> Result<String, EscapingRefusal> {
        switch self {
        case .raw:
            return .success(ValueText.format(value))
        case .json:
            return .success(ValueText.json(value))
        case .text:
            let text = ValueText.format(value)
            if let (offset, scalar) = Self.firstScalar(in: text, where: { $0.value < 0x20 && $0 != "\t" || $0.value == 0x7F }) {
                return .failure(EscapingRefusal(mode: self, offset: offset, scalar: scalar,
                                                hint: "it would start a new line of the file; write | json, | shell or | raw after the expression if the file can hold it"))
            }
            return .success(text)
        case .xml:
            let text = ValueText.format(value)
            if let (offset, scalar) = Self.firstScalar(in: text, where: { $0.value < 0x20 && $0 != "\t" && $0 != "\n" && $0 != "\r" }) {
                return .failure(EscapingRefusal(mode: self, offset: offset, scalar: scalar, hint: "XML 1.0 cannot hold it"))
            }
            var escaped = ""
            escaped.reserveCapacity(text.utf8.count)
            for scalar in text.unicodeScalars {
                switch scalar {
                case "&": escaped += "&amp;"
                case "<": escaped += "&lt;"
                case ">": escaped += "&gt;"
                case "\"": escaped += "&quot;"
                case "'": escaped += "&apos;"
                default: escaped.unicodeScalars.append(scalar)
                }
            }
            return .success(escaped)
        case .shell:
            let text = ValueText.format(value)
            var quoted = "'"
            for scalar in text.unicodeScalars {
                if scalar == "'" { quoted += "'\\''" } else { quoted.unicodeScalars.append(scalar) }
            }
            return .success(quoted + "'")
        }
    }

    private static func firstScalar(in text: String, where matches: (Unicode.Scalar) -> Bool) -> (Int, Unicode.Scalar)? {
        var offset = 0
        for scalar in text.unicodeScalars {
            if matches(scalar) { return (offset, scalar) }
            offset += String(scalar).utf8.count
        }
        return nil
    }
}

/// Why an ``Escaping`` mode refused a value: the character's name and byte offset, never the value.
public struct EscapingRefusal: Error, Sendable, Equatable {
    public var mode: Escaping
    public var offset: Int
    public var scalar: Unicode.Scalar
    public var hint: String

    public var message: String {
        let name: String
        switch scalar {
        case "\n": name = "a line feed"
        case "\r": name = "a carriage return"
        default: name = "control character U+\(String(scalar.value, radix: 16, uppercase: true).leftPadded(to: 4))"
        }
        return "the value holds \(name) at byte \(offset), which '\(mode.rawValue)' escaping refuses: \(hint)"
    }
}

extension String {
    func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
