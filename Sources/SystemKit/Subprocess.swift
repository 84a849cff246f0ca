import Glibc

/// Starting a program without a shell: `posix_spawnp`, the program looked up in `PATH`. The one
/// way both programs spawn (the daemon's command executions, `propctl serve`'s handlers and
/// `propctl bind --exec`'s coprocesses), so signal dispositions and descriptors are set up alike.
public enum Subprocess {
    /// A pipe whose two ends are close-on-exec, so no later child inherits them: only the ends
    /// a spawn redirects (`dup2` clears the flag on the copy) reach the program. (`pipe2` is not
    /// exported to Swift; callers spawn from one queue, so nothing spawns in between.)
    public static func pipe() -> Result<(read: Int32, write: Int32), Errno> {
        var ends: [Int32] = [-1, -1]
        guard Glibc.pipe(&ends) == 0 else { return .failure(.current) }
        for descriptor in ends { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
        return .success((ends[0], ends[1]))
    }

    /// Starts `argv` and returns its process id.
    ///
    /// - Parameters:
    ///   - redirections: each `parent` descriptor becomes the child's `child` descriptor (`dup2`).
    ///   - environment: the child's whole environment; nil passes this process's own.
    ///   - defaultSignals: signals whose disposition goes back to the default in the child (one
    ///     this process ignores, such as SIGPIPE, would otherwise stay ignored across `exec`).
    ///   - emptySignalMask: start the child with no signal blocked (libdispatch blocks those it
    ///     watches, and a blocked SIGTERM would not stop the child).
    ///   - ownProcessGroup: the child leads a new process group, so the whole tree it starts can
    ///     be signalled at once.
    /// - Returns: the `posix_spawnp` error when the program cannot be started.
    public static func spawn(_ argv: [String], redirections: [(child: Int32, parent: Int32)],
                             environment: [String: String]? = nil, defaultSignals: [Int32] = [],
                             emptySignalMask: Bool = false, ownProcessGroup: Bool = false) -> Result<pid_t, Errno> {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for redirection in redirections { posix_spawn_file_actions_adddup2(&actions, redirection.parent, redirection.child) }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var flags: Int32 = 0
        var defaults = sigset_t()
        sigemptyset(&defaults)
        if !defaultSignals.isEmpty {
            for signal in defaultSignals { sigaddset(&defaults, signal) }
            posix_spawnattr_setsigdefault(&attributes, &defaults)
            flags |= POSIX_SPAWN_SETSIGDEF
        }
        var mask = sigset_t()
        sigemptyset(&mask)
        if emptySignalMask {
            posix_spawnattr_setsigmask(&attributes, &mask)
            flags |= POSIX_SPAWN_SETSIGMASK
        }
        if ownProcessGroup {
            posix_spawnattr_setpgroup(&attributes, 0)
            flags |= POSIX_SPAWN_SETPGROUP
        }
        posix_spawnattr_setflags(&attributes, Int16(flags))

        let argvC = argv.map { strdup($0) } + [nil]
        let envC = environment.map { $0.map { strdup($0.key + "=" + $0.value) } + [nil] }
        defer {
            argvC.forEach { free($0) }
            envC?.forEach { free($0) }
        }
        var pid: pid_t = 0
        let result = envC.map { posix_spawnp(&pid, argv[0], &actions, &attributes, argvC, $0) }
            ?? posix_spawnp(&pid, argv[0], &actions, &attributes, argvC, environ)
        return result == 0 ? .success(pid) : .failure(Errno(rawValue: result))
    }
}
