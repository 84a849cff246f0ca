extension String {
    /// Every occurrence of `target` replaced, without Foundation.
    public func replacingAll(_ target: String, with replacement: String) -> String {
        split(separator: target, omittingEmptySubsequences: false).joined(separator: replacement)
    }
}
