/// Splits a command line into `ArgumentToken`s. Pure: it needs no command specification.
public enum ArgumentLexer {
    /// Tokenizes `arguments`, which exclude the program name (`CommandLine.arguments.dropFirst()`).
    public static func tokenize<Arguments: Sequence>(_ arguments: Arguments) -> [ArgumentToken]
    where Arguments.Element == String {
        var tokens: [ArgumentToken] = []
        var afterTerminator = false
        for argument in arguments {
            if afterTerminator {
                tokens.append(.value(argument))
            } else if argument == "--" {
                tokens.append(.terminator)
                afterTerminator = true
            } else {
                tokens.append(token(for: argument))
            }
        }
        return tokens
    }

    /// Classifies one argument that precedes any `--`.
    public static func token(for argument: String) -> ArgumentToken {
        if argument.hasPrefix("--") {
            let body = argument.dropFirst(2)
            guard let equals = body.firstIndex(of: "=") else { return .longOption(String(body), value: nil) }
            return .longOption(String(body[..<equals]), value: String(body[body.index(after: equals)...]))
        }
        // `-` alone conventionally means stdin, and `set a.b -5` must be able to write a negative
        // number; short option names are never digits, so neither can be mistaken for options.
        if argument.hasPrefix("-") && argument != "-" && !isNegativeNumber(argument) {
            return .shortOptions(String(argument.dropFirst()))
        }
        return .value(argument)
    }

    /// Whether `argument` reads as a negative decimal number: `-5`, `-3.5`, `-.5`, `-1e3`.
    public static func isNegativeNumber(_ argument: String) -> Bool {
        guard argument.hasPrefix("-") else { return false }
        let magnitude = argument.dropFirst()
        // Double also accepts "inf" and "nan"; demanding a leading digit or dot keeps `-i` an option.
        guard let first = magnitude.first, first.isASCII, first.isNumber || first == "." else { return false }
        return Double(magnitude) != nil
    }
}
