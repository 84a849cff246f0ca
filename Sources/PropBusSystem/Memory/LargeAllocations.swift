import CLinux

/// How the daemon's allocator treats large blocks (glibc's `mallopt(3)`).
public enum LargeAllocations {
    /// Maps every block of at least `bytes` on its own, so that it goes back to the system as
    /// soon as it is freed. By default glibc raises that threshold after each large free (up to
    /// 32 MiB), and from then on the big messages a caller sends (a refused 30 MiB command input)
    /// come from the heap and stay in the daemon's RSS: 8 of them left it at 170 MB, against
    /// 16 MB with this. 128 KiB is glibc's own starting threshold, so start-up is unchanged (a
    /// fixed 4 MiB kept 3 MiB more of a 100k-property start-up); values of 128 KiB and more are
    /// mapped each time (about a fifth more daemon CPU for 900 KiB Sets). Call once, at start-up.
    @discardableResult
    public static func returnToTheSystem(atLeast bytes: Int32 = 128 << 10) -> Bool {
        propbus_fix_mmap_threshold(bytes) == 1
    }
}
