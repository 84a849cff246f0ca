/// A validated D-Bus signature: zero or more single complete types.
///
/// Parsing enforces the specification's limits: at most 255 bytes, and at most 32 nested
/// arrays plus 32 nested structs. Dict entries may appear only as array elements and must have
/// a basic key type.
public struct Signature: Hashable, Sendable, CustomStringConvertible {
    /// The specification's maximum signature length, in bytes.
    public static let maximumLength = 255
    /// The specification's maximum array (and, separately, struct) nesting depth.
    public static let maximumDepth = 32

    /// The complete types, in order.
    public let types: [DBusType]

    /// The signature text.
    public var description: String { types.map(\.signature).joined() }

    /// Creates a signature from already-parsed types.
    public init(_ types: [DBusType]) { self.types = types }

    /// Parses and validates signature text.
    public init(validating text: String) throws(SignatureError) {
        let bytes = Array(text.utf8)
        guard bytes.count <= Self.maximumLength else {
            throw SignatureError(signature: text, reason: "longer than \(Self.maximumLength) bytes")
        }
        var parser = Parser(bytes: bytes, text: text)
        var types: [DBusType] = []
        while !parser.atEnd {
            types.append(try parser.parseType(arrayDepth: 0, structDepth: 0))
        }
        self.types = types
    }

    private struct Parser {
        let bytes: [UInt8]
        let text: String
        var index = 0

        var atEnd: Bool { index >= bytes.count }

        /// An error at `position`, the 0-based index of the offending byte; `index` by default,
        /// which is the length of the text when the signature ends too early.
        func fail(_ reason: String, at position: Int? = nil) -> SignatureError {
            SignatureError(signature: text, reason: "\(reason) at position \(position ?? index)")
        }

        mutating func parseType(arrayDepth: Int, structDepth: Int) throws(SignatureError) -> DBusType {
            guard !atEnd else { throw fail("expected a type, found the end") }
            let start = index
            let byte = bytes[index]
            index += 1
            guard let code = TypeCode(rawValue: byte) else {
                throw fail("unknown type code '\(Character(Unicode.Scalar(byte)))'", at: start)
            }
            switch code {
            case .array:
                guard arrayDepth < Signature.maximumDepth else { throw fail("arrays nested deeper than 32", at: start) }
                if !atEnd, bytes[index] == TypeCode.dictBegin.rawValue {
                    index += 1
                    let key = try parseType(arrayDepth: arrayDepth + 1, structDepth: structDepth)
                    guard key.isBasic else { throw fail("dict key must be a basic type, not '\(key.signature)'") }
                    let value = try parseType(arrayDepth: arrayDepth + 1, structDepth: structDepth)
                    guard !atEnd, bytes[index] == TypeCode.dictEnd.rawValue else {
                        throw fail("expected '}' to close a dict entry")
                    }
                    index += 1
                    return .dictionary(key: key, value: value)
                }
                return .array(try parseType(arrayDepth: arrayDepth + 1, structDepth: structDepth))
            case .structBegin:
                guard structDepth < Signature.maximumDepth else { throw fail("structs nested deeper than 32", at: start) }
                var fields: [DBusType] = []
                while true {
                    guard !atEnd else { throw fail("expected ')' to close a struct") }
                    if bytes[index] == TypeCode.structEnd.rawValue {
                        index += 1
                        break
                    }
                    fields.append(try parseType(arrayDepth: arrayDepth, structDepth: structDepth + 1))
                }
                guard !fields.isEmpty else { throw fail("empty struct", at: index - 1) }
                return .structure(fields)
            case .structEnd: throw fail("unexpected ')'", at: start)
            case .dictBegin: throw fail("dict entry outside an array", at: start)
            case .dictEnd: throw fail("unexpected '}'", at: start)
            case .structValue, .dictEntryValue: throw fail("unknown type code '\(code.character)'", at: start)
            default:
                // Every other code is a basic type's or `v`.
                guard let single = DBusType(basicCode: code) else { throw fail("unknown type code '\(code.character)'", at: start) }
                return single
            }
        }
    }
}

/// A signature that breaks the D-Bus specification's rules.
public struct SignatureError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The offending signature text.
    public var signature: String
    /// What is wrong with it.
    public var reason: String

    public var description: String { "invalid signature '\(signature)': \(reason)" }
}
