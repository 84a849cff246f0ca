/// The one rule by which `list`, `watch`, `dump` and `reset --recursive` select keys: a prefix
/// names a group and its subgroups (or a single key), never a string prefix, so `view` selects
/// `view.x` and `view.sub.y` but never `viewmodel.x`.
struct KeyPrefix: Sendable, Equatable {
    /// The prefix without a trailing dot; empty selects every key.
    let text: String

    /// Reads a prefix as typed; a trailing dot (`settings.`) is accepted and ignored.
    init(_ typed: String) {
        var text = typed
        while text.hasSuffix(".") { text.removeLast() }
        self.text = text
    }

    /// Whether `key` is the prefix itself or lies in its group or a subgroup.
    func matches(_ key: String) -> Bool {
        text.isEmpty || key == text || (key.hasPrefix(text) && key.utf8.dropFirst(text.utf8.count).first == UInt8(ascii: "."))
    }
}
