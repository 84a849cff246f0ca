/// Bytes that must be text: UTF-8 without NUL bytes, the only strings a D-Bus `s` can carry.
///
/// Where bytes from outside (a program's stdout) become a string value, they are checked, not
/// decoded with replacement characters: a result that silently differs from what was written
/// is worse than a clear error.
public enum TextBytes {
    /// The first reason `bytes` are not text, with its byte offset.
    public enum Problem: Equatable, Sendable, CustomStringConvertible {
        case nul(offset: Int)
        case invalidUTF8(offset: Int)

        /// "a NUL byte at offset 3", "invalid UTF-8 at offset 0".
        public var description: String {
            switch self {
            case .nul(let offset): "a NUL byte at offset \(offset)"
            case .invalidUTF8(let offset): "invalid UTF-8 at offset \(offset)"
            }
        }
    }

    /// The first problem in `bytes`, or `nil` when they are UTF-8 text without NUL.
    public static func firstProblem<Bytes: Collection>(in bytes: Bytes) -> Problem? where Bytes.Element == UInt8 {
        var iterator = bytes.makeIterator()
        var decoder = UTF8()
        var offset = 0
        while true {
            switch decoder.decode(&iterator) {
            case .scalarValue(let scalar):
                if scalar == "\0" { return .nul(offset: offset) }
                offset += UTF8.width(scalar)
            case .emptyInput:
                return nil
            case .error:
                return .invalidUTF8(offset: offset)
            }
        }
    }

    /// `text` with every NUL shown as U+FFFD, for a diagnostic that must fit in a D-Bus string.
    public static func replacingNUL(in text: String) -> String {
        guard text.utf8.contains(0) else { return text }
        var scalars = String.UnicodeScalarView()
        for scalar in text.unicodeScalars { scalars.append(scalar == "\0" ? "\u{FFFD}" : scalar) }
        return String(scalars)
    }
}
