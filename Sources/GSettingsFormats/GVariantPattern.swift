/// Type inference for GVariant's text format, as GLib does it: every part of a value has a
/// pattern, a type string with wildcards; the parts of an array (and the keys of a dictionary)
/// must coalesce into one; the result is then made definite.
///
/// Wildcards: `*` any type; `N` any number (`ynqiuxthd`, else `i`); `S` any string (`sog`,
/// else `s`); a leading `M` marks a value that may also stand for `just` itself.
enum GVariantPattern {
    /// The pattern of a parsed value.
    static func of(_ syntax: GVariantSyntax) throws(GVariantError) -> [UInt8] {
        switch syntax {
        case .array(let items):
            guard !items.isEmpty else { return Array("Ma*".utf8) }
            return Array("Ma".utf8) + (try common(items))
        case .tuple(let items):
            var pattern = Array("M(".utf8)
            for item in items { pattern += try of(item) }
            return pattern + [UInt8(ascii: ")")]
        case .variant: return Array("Mv".utf8)
        case .dictionary(let keys, let values, let freestanding):
            guard !keys.isEmpty else { return Array("Ma{**}".utf8) }
            let key = try common(keys)
            let keyChar = key.first == UInt8(ascii: "M") && key.count > 1 ? key[1] : key[0]
            guard "bynqiuxthdsogNS".utf8.contains(keyChar) else { throw GVariantError("dictionary keys must have basic types") }
            // GLib takes the values' pattern from the first value; the others are checked
            // against the type that comes of it.
            return Array((freestanding ? "M{" : "Ma{").utf8) + [keyChar] + (try of(values[0])) + [UInt8(ascii: "}")]
        case .boolean: return Array("Mb".utf8)
        case .number(let token):
            let floating = token.contains(".") || (!token.hasPrefix("0x") && token.contains("e")) || token.contains("inf") || token.contains("nan")
            return Array((floating ? "Md" : "MN").utf8)
        case .maybe(let child):
            guard let child else { return Array("m*".utf8) }
            return [UInt8(ascii: "m")] + (try of(child))
        case .typed(let type, _): return Array(type.description.utf8)
        case .string: return Array("MS".utf8)
        case .bytestring: return Array("May".utf8)
        }
    }

    /// The pattern every one of `items` fits, or an error when they have no common type.
    private static func common(_ items: [GVariantSyntax]) throws(GVariantError) -> [UInt8] {
        var pattern = try of(items[0])
        for item in items.dropFirst() {
            guard let merged = coalesce(pattern, try of(item)) else { throw GVariantError("unable to find a common type") }
            pattern = merged
        }
        return pattern
    }

    /// The most general pattern both `left` and `right` fit, or nil.
    static func coalesce(_ left: [UInt8], _ right: [UInt8]) -> [UInt8]? {
        var sides = ([UInt8](left)[...], [UInt8](right)[...])
        var out: [UInt8] = []
        while let l = sides.0.first, let r = sides.1.first {
            if l == r {
                out.append(l)
                sides.0.removeFirst()
                sides.1.removeFirst()
                continue
            }
            // Try each rule with left as `one`, then with right.
            if !step(&sides.0, &sides.1, &out) && !step(&sides.1, &sides.0, &out) { return nil }
        }
        return sides.0.isEmpty && sides.1.isEmpty ? out : nil
    }

    /// One step of coalescing where `one` holds the wildcard; false when no rule applies.
    private static func step(_ one: inout ArraySlice<UInt8>, _ other: inout ArraySlice<UInt8>, _ out: inout [UInt8]) -> Bool {
        let o = other.first!
        switch one.first! {
        case UInt8(ascii: "*") where o != UInt8(ascii: ")"):
            copyOneType(from: &other, to: &out)
            one.removeFirst()
        case UInt8(ascii: "M") where o == UInt8(ascii: "m"):
            out.append(o)
            other.removeFirst()
        case UInt8(ascii: "M") where o != UInt8(ascii: "*"):
            one.removeFirst()
        case UInt8(ascii: "N") where "ynqiuxthd".utf8.contains(o), UInt8(ascii: "S") where "sog".utf8.contains(o):
            out.append(o)
            other.removeFirst()
            one.removeFirst()
        default:
            return false
        }
        return true
    }

    /// Moves one complete pattern (its `a`, `m` and `M` prefixes, then one bracketed group or
    /// one character) from `from` to `out`.
    private static func copyOneType(from: inout ArraySlice<UInt8>, to out: inout [UInt8]) {
        while let c = from.first, c == UInt8(ascii: "a") || c == UInt8(ascii: "m") || c == UInt8(ascii: "M") {
            out.append(c)
            from.removeFirst()
        }
        var brackets = 0
        repeat {
            guard let c = from.first else { return }
            if c == UInt8(ascii: "(") || c == UInt8(ascii: "{") { brackets += 1 }
            if c == UInt8(ascii: ")") || c == UInt8(ascii: "}") { brackets -= 1 }
            out.append(c)
            from.removeFirst()
        } while brackets > 0
    }

    /// The definite type a pattern resolves to: `M` dropped, `S` a string, `N` an int32; a `*`
    /// left means the text does not say its type.
    static func resolve(_ pattern: [UInt8]) throws(GVariantError) -> GVariantType {
        var text = ""
        for c in pattern {
            switch c {
            case UInt8(ascii: "*"): throw GVariantError("unable to infer type (annotate it, e.g. @as [])")
            case UInt8(ascii: "M"): continue
            case UInt8(ascii: "S"): text += "s"
            case UInt8(ascii: "N"): text += "i"
            default: text.unicodeScalars.append(Unicode.Scalar(c))
            }
        }
        return try GVariantType(parsing: text)
    }
}
