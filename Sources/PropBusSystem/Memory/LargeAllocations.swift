import CLinux

/// How the daemon's allocator treats large blocks (glibc's `mallopt(3)`).
public enum LargeAllocations {
    /// Maps every block of at least `bytes` on its own, so that it goes back to the system as
    /// soon as it is freed. By default glibc raises that threshold after each large free (up to
    /// 32 MiB), and from then on the big messages a caller sends (a refused 30 MiB command input)
    /// come from the heap and stay in the daemon's RSS: 8 of them left it at 170 MB, against
    /// 16 MB with this. 4 MiB, above the default value size, keeps values themselves on the heap
    /// (mapping each 1 MiB value was slower). Call once, at start-up.
    @discardableResult
    public static func returnToTheSystem(atLeast bytes: Int32 = 4 << 20) -> Bool {
        propbus_fix_mmap_threshold(bytes) == 1
    }
}
