// "Did you mean" for subcommands, options and keys: one measure for every suggestion propctl makes.

/// The candidate nearest to `word` by edit distance, if it is near enough to be a likely typo.
func closest(to word: String, among candidates: [String]) -> String? {
    let scored = candidates.map { (candidate: $0, distance: editDistance(word, $0)) }
    guard let best = scored.min(by: { $0.distance < $1.distance }) else { return nil }
    return best.distance <= max(1, min(2, word.count / 3)) ? best.candidate : nil
}

/// Levenshtein distance between two strings, by characters.
func editDistance(_ lhs: String, _ rhs: String) -> Int {
    let a = Array(lhs), b = Array(rhs)
    guard !a.isEmpty, !b.isEmpty else { return max(a.count, b.count) }
    var previous = Array(0...b.count)
    for i in 1...a.count {
        var current = [i] + Array(repeating: 0, count: b.count)
        for j in 1...b.count {
            let substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)
            current[j] = min(previous[j] + 1, current[j - 1] + 1, substitution)
        }
        previous = current
    }
    return previous[b.count]
}
